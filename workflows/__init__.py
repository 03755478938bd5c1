"""Deterministic Temporal workflows: orchestration only, no I/O.

Empty by design: see `workflows.registry` for the list of workflow types.
"""
