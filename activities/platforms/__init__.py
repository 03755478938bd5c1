"""Platforms that create, bootstrap and delete slices; one module per platform (see base.py)."""
