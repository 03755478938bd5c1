"""The job workflow's part in job trees: a child announces itself to its parent; a parent's end sweeps its tree.

A child job (its request names a parent) signals CHILD_STARTED to its parent before it starts any
task. If the parent has ended, the signal fails and the child ends KILLED at once without running
anything: a child submitted while its parent was finishing never leaks. A parent that has heard
from a child (`has_children`, carried across continue-as-new) runs `kill_descendants` when it ends,
in any state, before its workflow closes; a child announcing itself during that sweep makes the
parent sweep again (Temporal does not let a workflow close over a signal it has not handled), so no
child escapes. A job without children pays nothing.
"""

from __future__ import annotations

from collections import deque
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.contracts import CHILD_STARTED, KILL_DESCENDANTS, KillDescendants

RECENT_CHILDREN = 100
"""Children signalled by id at the sweep (visibility may lag one that just started); older ones it lists."""
SWEEP_TIMEOUT = timedelta(minutes=2)
SWEEP_HEARTBEAT = timedelta(seconds=5)
"""A controller killed mid-sweep: the sweep is retried elsewhere this long after its last heartbeat, while the
descendants it had not reached yet run on. 5 s (10 s until 2026-12-06), as the scheduler's own activities: the sweep
beats at its start, for each job it lists and after each signal, none of which waits on anything but one
Temporal RPC; the SDK sends a beat at most every 4 s (0.8 x this), so a sweep of a few seconds costs one or
two; and a timeout taken in error only runs the idempotent sweep again (activities/job_tree.py)."""
SWEEP_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10))
"""Retried until it succeeds: a descendant left running is a leak."""


class JobTree:
    """A job's side of its tree: the children that announced themselves, and the sweep at its end."""

    def __init__(self, has_children: bool = False) -> None:
        self.has_children = has_children  # carried across continue-as-new
        self._announced = 0  # CHILD_STARTED signals taken by this run
        self._recent: deque[str] = deque(maxlen=RECENT_CHILDREN)

    def child_started(self, child_id: str) -> None:
        """A child job started: this job's end must kill it if it still runs then."""
        self.has_children = True
        self._announced += 1
        self._recent.append(child_id)

    async def sweep(self, state: str) -> None:
        """Kill this ended job's unfinished descendants (durably); again while children keep announcing."""
        while self.has_children:
            seen = self._announced
            await workflow.execute_activity(
                KILL_DESCENDANTS,
                KillDescendants(workflow.info().workflow_id, state, list(self._recent)),
                result_type=int,
                start_to_close_timeout=SWEEP_TIMEOUT,
                heartbeat_timeout=SWEEP_HEARTBEAT,
                retry_policy=SWEEP_RETRY,
            )
            await workflow.wait_condition(workflow.all_handlers_finished)
            if self._announced == seen:
                return


async def announce_to_parent(parent: str) -> bool:
    """Tell the parent job this child started; False if the parent has ended (or never was)."""
    if not parent:
        return True
    try:
        await workflow.get_external_workflow_handle(parent).signal(CHILD_STARTED, workflow.info().workflow_id)
    except Exception as err:  # the parent's workflow is closed: the signal cannot reach it
        workflow.logger.info("parent %s of %s has ended: %s", parent, workflow.info().workflow_id, err)
        return False
    return True
