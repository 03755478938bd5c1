"""A task's enqueue reaches the scheduler even when the server refuses it at first.

A retried task enqueues its next attempt itself. When no scheduler runs at that
moment (terminated, not started yet) or the server refuses the signal (the
scheduler run's signal limit), the task sends it again with backoff instead of
waiting forever for an assignment nobody will make.
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from activities.contracts import SCHEDULER_WORKFLOW_ID, task_workflow_id
from activities.proto import cluster_pb2 as pb
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from activities.signals import deliver_assignments, deliver_signals
from tests.support import workflows_on_dev_server
from workflows.messages import SchedulingSpec, TaskInput
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow
from workflows.tasks.task_workflow import TaskWorkflow


async def _pending_tasks(client: Client) -> int:
    summary = await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).query("summary", result_type=pb.ClusterSummary)
    return summary.pending_tasks


async def test_an_enqueue_refused_while_no_scheduler_runs_arrives_once_one_does() -> None:
    activities = [find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler]
    async with workflows_on_dev_server("enqueue-retry", [SchedulerWorkflow, TaskWorkflow], activities) as (
        client, queue,
    ):  # fmt: skip
        spec = SchedulingSpec(cpu_millis=100, memory_bytes=2**20)
        task = await client.start_workflow(
            TaskWorkflow.run, TaskInput("job-a", 0, 1, spec, argv=["true"], enqueued_by_job=False),
            id=task_workflow_id("job-a", 0), task_queue=queue,
        )  # fmt: skip
        refused = []
        for _ in range(100):  # its first sends are refused: there is no scheduler
            refused = [e async for e in task.fetch_history_events() if e.HasField(
                "signal_external_workflow_execution_failed_event_attributes")]  # fmt: skip
            if refused:
                break
            await asyncio.sleep(0.1)
        assert refused, "the task's first enqueue should have been refused"
        await client.start_workflow(SchedulerWorkflow.run, None, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        for _ in range(100):  # backoff 1, 2, 4 s ...: the next send lands within a few seconds
            if await _pending_tasks(client) == 1:
                break
            await asyncio.sleep(0.2)
        assert 1 == await _pending_tasks(client)  # queued, waiting for a worker
        await task.terminate("test done")
        await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).terminate("test done")
