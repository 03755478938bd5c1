"""The `iris` command line: a thin layer over the client, the controller and the worker agent (entry: `main.py`)."""
