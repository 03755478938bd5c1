"""Deploying Iris: images (`iris build`), worker versioning of the control plane, and an existing Temporal's setup."""
