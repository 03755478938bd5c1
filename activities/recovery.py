"""Recovery: a scheduler that started empty asks the fleet and the queue to report again,
and a job that adopted tasks finds those whose workflow closed without reporting.

The scheduler's state lives only in its workflow. When that workflow is
terminated and started afresh (by hand, or after a bad deploy), it knows no
worker and no task. This activity lists the live WorkerWorkflows and
JobWorkflows and TaskWorkflows in visibility and signals each: a worker's monitor
sends its agent's registration again, a reserving job its reservation, a waiting
task enqueues itself again, a task that holds a place claims it. Visibility lags by a moment; anything it misses started
after the new scheduler did, and so reported to it on its own.

So only the monitors that started before the new scheduler's run are asked: one that started after it belongs to
an agent that registers with it anyway. A cluster's first scheduler starts empty while its agents are registering,
and asking those monitors again sent the scheduler a second registration of up to 59 of 100 agents in the scale
bench, in the middle of that storm.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import structlog
from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import (
    FIND_LOST_TASKS,
    REBUILD_SCHEDULER,
    REGISTER_AGAIN,
    SCHEDULER_RESTARTED,
    LostTask,
    task_workflow_id,
)
from activities.heartbeat import heartbeating

log = structlog.get_logger("iris.recovery")
MAX_IN_FLIGHT = 64
# What is asked, in order, and whether only the runs that started by the new scheduler's start are. Only monitors:
# a monitor never continues as new, so its run's start is its session's. A job or task run may have continued as new
# after the scheduler started while its work was placed by the one before, and is always asked.
ASKED = (
    ("WorkerWorkflow", REGISTER_AGAIN, True),  # workers first: claims then land on known workers
    ("JobWorkflow", SCHEDULER_RESTARTED, False),  # a reserving job asks for its reservation again
    ("TaskWorkflow", SCHEDULER_RESTARTED, False),
)


async def ask_to_report(
    client: Client, heartbeat: bool = False, started_before: datetime | None = None
) -> dict[str, int]:
    """Signal every running worker monitor (those that started by `started_before`, if given), job and task; how many
    of each were asked."""
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

    for workflow_type, signal, by_start in ASKED:
        query = f"WorkflowType = '{workflow_type}' AND ExecutionStatus = 'Running'"
        if by_start and started_before is not None:
            query += f" AND StartTime <= '{started_before.astimezone(UTC).isoformat()}'"
        sends = [ask(wf.id, wf.run_id, signal) async for wf in client.list_workflows(query)]
        asked[workflow_type] = sum(await asyncio.gather(*sends))
        if heartbeat:
            activity.heartbeat(asked)
    return asked


@activity.defn(name=REBUILD_SCHEDULER)
async def rebuild_scheduler() -> dict[str, int]:
    """Ask the live workers (those whose monitor started before this scheduler run) and tasks to report to it again
    (it started empty)."""
    info = activity.info()
    client = activity.client()
    run = await client.get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id).describe()
    asked = await ask_to_report(client, heartbeat=True, started_before=run.start_time)
    log.info("scheduler.rebuild_asked", **{k.lower(): v for k, v in asked.items()})
    return asked


@activity.defn(name=FIND_LOST_TASKS)
async def find_lost_tasks(job_id: str, indexes: list[int]) -> list[LostTask]:
    """Which of these tasks of the job closed other than by completing.

    A task that completes has reported its end first, so only a workflow terminated, failed or
    timed out from outside is lost. One visibility query for the job, usually answered empty.
    """
    wanted = {task_workflow_id(job_id, i): i for i in indexes}
    query = (
        f"WorkflowType = 'TaskWorkflow' AND WorkflowId STARTS_WITH '{job_id}/task-' AND ExecutionStatus != 'Running' "
        "AND ExecutionStatus != 'Completed' AND ExecutionStatus != 'ContinuedAsNew'"
    )

    async def listed() -> list[LostTask]:
        return [
            LostTask(wanted[wf.id], wf.status.name if wf.status else "CLOSED")
            async for wf in activity.client().list_workflows(query)
            if wf.id in wanted
        ]

    lost = await heartbeating(listed())
    if lost:
        log.warning("job.lost_tasks", job_id=job_id, tasks=[t.index for t in lost])
    return lost
