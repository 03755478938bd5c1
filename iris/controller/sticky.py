"""How long a workflow's next task waits for the controller that ran its last one: a leaf, so the CLI reads it
without importing Temporal.

Temporal hands a workflow's next task to the worker that holds it in its cache (its sticky queue) and moves it to
the shared queue only after this long without that worker taking it. A SIGKILLed controller never takes it: its
workflows stand still this long after the kill, whatever another controller does meanwhile.
"""

from __future__ import annotations

__all__ = ["DEFAULT_STICKY_TIMEOUT_SECONDS", "MAX_STICKY_TIMEOUT_SECONDS"]

DEFAULT_STICKY_TIMEOUT_SECONDS = 10.0  # the Temporal SDK's default
MAX_STICKY_TIMEOUT_SECONDS = 300.0
