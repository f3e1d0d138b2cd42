"""Lowering rules: conv."""
