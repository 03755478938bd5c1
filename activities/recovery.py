"""A scheduler that started empty asks the fleet and the queue to report again.

The scheduler's state lives only in its workflow. When that workflow is
terminated and started afresh (by hand, or after a bad deploy), it knows no
worker and no task. This activity lists the live WorkerWorkflows and
TaskWorkflows in visibility and signals each: a worker's monitor sends its
agent's registration again, a waiting task enqueues itself again, a task that
holds a place claims it. Visibility lags by a moment; anything it misses started
after the new scheduler did, and so reported to it on its own.
"""

from __future__ import annotations

import asyncio

import structlog
from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import REBUILD_SCHEDULER, REGISTER_AGAIN, SCHEDULER_RESTARTED

log = structlog.get_logger("iris.recovery")
MAX_IN_FLIGHT = 64
ASKED = (
    ("WorkerWorkflow", REGISTER_AGAIN),  # workers first: claims then land on known workers
    ("TaskWorkflow", SCHEDULER_RESTARTED),
)


async def ask_to_report(client: Client, heartbeat: bool = False) -> dict[str, int]:
    """Signal every running worker monitor and task; how many of each were asked."""
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)
    asked: dict[str, int] = {}

    async def ask(workflow_id: str, run_id: str | None, signal: str) -> bool:
        async with gate:
            try:
                await client.get_workflow_handle(workflow_id, run_id=run_id).signal(signal)
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:  # ended since it was listed
                    return False
                raise
            return True

    for workflow_type, signal in ASKED:
        query = f"WorkflowType = '{workflow_type}' AND ExecutionStatus = 'Running'"
        sends = [ask(wf.id, wf.run_id, signal) async for wf in client.list_workflows(query)]
        asked[workflow_type] = sum(await asyncio.gather(*sends))
        if heartbeat:
            activity.heartbeat(asked)
    return asked


@activity.defn(name=REBUILD_SCHEDULER)
async def rebuild_scheduler() -> dict[str, int]:
    """Ask the live workers and tasks to report to the scheduler again (it started empty)."""
    asked = await ask_to_report(activity.client(), heartbeat=True)
    log.info("scheduler.rebuild_asked", **{k.lower(): v for k, v in asked.items()})
    return asked
