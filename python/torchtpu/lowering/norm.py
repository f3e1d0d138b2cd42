"""Lowering rules: norm."""
