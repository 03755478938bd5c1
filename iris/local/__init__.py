"""The embedded local cluster: a Temporal dev server, the controller, one process per worker, and their supervisor."""
