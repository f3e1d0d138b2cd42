"""Lowering rules: transformer."""
