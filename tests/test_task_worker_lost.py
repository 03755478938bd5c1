"""How a task reads an attempt whose worker stopped heartbeating (workflows/tasks/task_workflow.py; docs/reliability.md,
"Leases", Outcomes).

A fencing agent starts the task's process right after the server recorded a heartbeat that leased the attempt,
and says so in its next heartbeat. An agent killed between the two leaves a process that ran (and died with its
lease) while the server's last heartbeat still says only "leased": that attempt lost its worker and counts a
preemption. Only an attempt with no heartbeat recorded at all is a dispatch failure, placed again for free.
The agent here is a stand-in activity on the worker's queue, so the window is hit every time.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest
from temporalio import activity, workflow
from temporalio.common import RawValue
from temporalio.worker import Worker

from activities.contracts import (
    ASSIGNED,
    LEASE_KEY,
    LEASE_MARGIN_KEY,
    LEASED,
    MIN_HEARTBEAT_TIMEOUT_SECONDS,
    RUN_TASK,
    SCHEDULER_WORKFLOW_ID,
    RunTaskInput,
    RunTaskResult,
    task_workflow_id,
    worker_task_queue,
)
from tests.support import workflows_on_dev_server
from workflows.messages import Assigned, SchedulingSpec, TaskInput, TaskResult
from workflows.states import TaskState
from workflows.tasks.task_workflow import TaskWorkflow


@workflow.defn(name="SchedulerSink", sandboxed=False)  # a stub: nothing to guard
class SchedulerSink:
    """Stands in for the scheduler under its workflow id: takes the task's release (and any other signal), and
    answers `signals` with each one's name and payload as received."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str]] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(dynamic=True)
    def any_signal(self, name: str, args: Sequence[RawValue]) -> None:
        self.received.append((name, args[0].payload.data.decode() if args else ""))

    @workflow.query
    def signals(self) -> list[tuple[str, str]]:
        return self.received


@activity.defn(name=RUN_TASK)
async def leased_then_killed(inp: RunTaskInput) -> RunTaskResult:
    """An agent whose lease heartbeat was recorded, killed before its next one (the process had started)."""
    activity.heartbeat(LEASED, {LEASE_KEY: 1.0, LEASE_MARGIN_KEY: 0.0})
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


@activity.defn(name=RUN_TASK)
async def killed_before_any_heartbeat(inp: RunTaskInput) -> RunTaskResult:
    """An agent that took the attempt and died before the server recorded anything of it."""
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("agent", "state", "preemptions", "error"),
    [
        (leased_then_killed, TaskState.WORKER_FAILED, 1, "lease expired"),
        (killed_before_any_heartbeat, TaskState.PENDING, 0, "before the task started"),
    ],
)
async def test_a_worker_lost_after_it_leased_the_attempt_counts_a_preemption(
    agent: object, state: TaskState, preemptions: int, error: str
) -> None:
    async with workflows_on_dev_server("worker-lost", [TaskWorkflow, SchedulerSink], []) as (client, queue):
        await client.start_workflow(SchedulerSink.run, id=SCHEDULER_WORKFLOW_ID, task_queue=queue)
        worker_id = f"w-{uuid.uuid4().hex[:6]}"
        async with Worker(client, task_queue=worker_task_queue(worker_id), activities=[agent]):  # type: ignore[list-item]
            spec = SchedulingSpec(cpu_millis=100, memory_bytes=2**20)
            inp = TaskInput("job-a", 0, 1, spec, argv=["true"], gang=True, max_retries_preemption=0)
            task = await client.start_workflow(
                TaskWorkflow.run, inp, id=task_workflow_id("job-a", 0), task_queue=queue
            )  # fmt: skip
            # The worker's agent declared the shortest heartbeat timeout (--heartbeat-timeout 2): the attempt is
            # lost 2 s after its last recorded heartbeat, not the default 10 s.
            await task.signal(ASSIGNED, Assigned(0, worker_id, heartbeat_timeout_seconds=MIN_HEARTBEAT_TIMEOUT_SECONDS))
            result = await asyncio.wait_for(task.result(), timeout=60)
    assert isinstance(result, TaskResult)
    assert (state, preemptions, 0) == (TaskState(result.state), result.preemption_count, result.failure_count)
    assert error in result.error
    assert result.dispatch_failed == (preemptions == 0)
