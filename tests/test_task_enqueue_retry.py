"""A task's enqueue reaches the scheduler even when the server refuses it at first.

A retried task enqueues its next attempt itself. When no scheduler runs at that
moment (terminated, not started yet) or the server refuses the signal (the
scheduler run's signal limit), the task sends it again with backoff instead of
waiting forever for an assignment nobody will make.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.proto import cluster_pb2 as pb
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from activities.signals import deliver_signals
from iris.controller import workflow_runner
from workflows.ids import SCHEDULER_WORKFLOW_ID, task_workflow_id
from workflows.messages import SchedulingSpec
from workflows.scheduler_workflow import SchedulerWorkflow
from workflows.task_workflow import TaskInput, TaskWorkflow

TEMPORAL = Path(sys.executable).with_name("temporal")


async def _pending_tasks(client: Client) -> int:
    summary = await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).query("summary", result_type=pb.ClusterSummary)
    return summary.pending_tasks


async def test_an_enqueue_refused_while_no_scheduler_runs_arrives_once_one_does() -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL),
        dev_server_extra_args=["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"],
    )
    queue = f"enqueue-retry-{uuid.uuid4().hex[:8]}"
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as executor:
            async with Worker(
                env.client, task_queue=queue, workflows=[SchedulerWorkflow, TaskWorkflow],
                activities=[find_assignments_activity, deliver_signals, rebuild_scheduler], activity_executor=executor,
                workflow_runner=workflow_runner(),
            ):  # fmt: skip
                spec = SchedulingSpec(cpu_millis=100, memory_bytes=2**20)
                task = await env.client.start_workflow(
                    TaskWorkflow.run, TaskInput("job-a", 0, 1, spec, argv=["true"], enqueued_by_job=False),
                    id=task_workflow_id("job-a", 0), task_queue=queue,
                )  # fmt: skip
                await asyncio.sleep(2.5)  # its first sends are refused: there is no scheduler
                refused = [e async for e in task.fetch_history_events() if e.HasField(
                    "signal_external_workflow_execution_failed_event_attributes")]  # fmt: skip
                assert refused, "the task's first enqueue should have been refused"
                await env.client.start_workflow(SchedulerWorkflow.run, None, id=SCHEDULER_WORKFLOW_ID,
                                                task_queue=queue)  # fmt: skip
                for _ in range(100):  # backoff 1, 2, 4 s ...: the next send lands within a few seconds
                    if await _pending_tasks(env.client) == 1:
                        break
                    await asyncio.sleep(0.2)
                assert 1 == await _pending_tasks(env.client)  # queued, waiting for a worker
                await task.terminate("test done")
                await env.client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).terminate("test done")
    finally:
        await env.shutdown()
