"""What a replayed workflow task need not build: the input of the commands it issues.

On replay the SDK matches each command with the event history holds by its kind and id, never by its input, and
what the command returned (a pass's plan, a delivery's outcome) comes from history. So the scheduler's heavy
inputs (the pass's snapshot, the carry a run closes with, a delivery's signals) are built and encoded only
when the task is new: a run replayed whole (a controller's restart, a query that reached a closed run, a close
the server refused because signals came in meanwhile) spends its time on what changes the state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from temporalio import workflow

T = TypeVar("T")


def command_input(build: Callable[[], T], replayed: T) -> T:
    """`build()`, or `replayed` (an empty stand-in) in a replayed workflow task."""
    return replayed if workflow.unsafe.is_replaying() else build()
