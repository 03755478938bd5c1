"""Stopping a running attempt through its agent's own queue (`stop_task`), which the agent polls: an eviction's,
with the scheduler's grace, and a kill's, sent beside the cancellation an agent hears of only with its next
heartbeat (up to a lease beat, 3 s, later).

Workflow code: sandboxed, as the task workflow that calls it.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import STOP_TASK, RunTaskResult, StopTask, worker_task_queue

DISPATCH_TIMEOUT = timedelta(seconds=5)  # a worker that does not pick the task (or its stop) up by then is skipped
KILL_STOP_TIMEOUT = timedelta(seconds=60)  # a kill's stop_task: the agent's kill grace (5 s by default) and then some


def _stop_on_agent(stop: StopTask, worker_id: str, timeout: timedelta, summary: str) -> workflow.ActivityHandle[bool]:
    return workflow.start_activity(
        STOP_TASK, stop, result_type=bool,
        task_queue=worker_task_queue(worker_id), schedule_to_start_timeout=DISPATCH_TIMEOUT,
        start_to_close_timeout=timeout, retry_policy=RetryPolicy(maximum_attempts=1), summary=summary,
    )  # fmt: skip


async def evict(running: workflow.ActivityHandle[RunTaskResult], stop: StopTask, worker_id: str) -> None:
    """Ask the worker's agent to stop the attempt with the grace; when it cannot (the attempt has not
    started there, the agent is gone), cancel the attempt instead (the agent's own short grace)."""
    summary = f"evict attempt {stop.attempt}"
    try:
        stopped = await _stop_on_agent(stop, worker_id, timedelta(seconds=stop.grace_seconds + 30), summary)
    except ActivityError:
        stopped = False
    if not stopped and not running.done():
        running.cancel()


async def until_ended(running: workflow.ActivityHandle[RunTaskResult], kill: StopTask, worker_id: str) -> RunTaskResult:
    """The attempt's result. When the task is killed meanwhile, `kill` goes to the agent at once, and the
    attempt is cancelled as before (the agent's next heartbeat stops it if the stop did not reach it)."""
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        if workflow.cancellation_reason() is None:
            raise
        if running.done():  # it ended as the kill came: what it reported, as without the stop
            return await running
    _stop_on_agent(kill, worker_id, KILL_STOP_TIMEOUT, f"kill attempt {kill.attempt}")
    running.cancel()
    return await running
