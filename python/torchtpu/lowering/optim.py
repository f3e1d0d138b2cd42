"""Lowering rules: optim."""
