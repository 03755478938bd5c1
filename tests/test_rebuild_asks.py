"""A scheduler that started empty asks only the monitors that started before it to register again; every job.

A monitor that started after it belongs to an agent registering with it right now: asking it too sent a cluster's
first scheduler a second registration from up to 59 of 100 agents in the scale bench, in the middle of their
registration storm. A job's run may have continued as new after the scheduler started while the one before placed
its work, so jobs and tasks are asked whenever they started. Real dev server, the real `rebuild_scheduler` activity.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio import workflow
from temporalio.client import Client
from temporalio.common import VersioningBehavior

from activities.contracts import REBUILD_SCHEDULER, REGISTER_AGAIN, SCHEDULER_RESTARTED
from activities.recovery import rebuild_scheduler
from tests.support import workflows_on_dev_server


@workflow.defn(name="WorkerWorkflow", sandboxed=False, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class CountingMonitor:
    """Stands in for a worker's monitor: counts how often it was asked to register again."""

    def __init__(self) -> None:
        self.asked = 0

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=REGISTER_AGAIN)
    def register_again(self) -> None:
        self.asked += 1

    @workflow.query
    def times_asked(self) -> int:
        return self.asked


@workflow.defn(name="JobWorkflow", sandboxed=False, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class CountingJob:
    """Stands in for a job's run: counts how often it was told the scheduler restarted."""

    def __init__(self) -> None:
        self.asked = 0

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name=SCHEDULER_RESTARTED)
    def scheduler_restarted(self) -> None:
        self.asked += 1

    @workflow.query
    def times_asked(self) -> int:
        return self.asked


@workflow.defn(sandboxed=False, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class EmptyScheduler:
    """Stands in for a scheduler run that started empty: rebuilds once told to (so a monitor can start between)."""

    def __init__(self) -> None:
        self.go = False

    @workflow.run
    async def run(self) -> dict[str, int]:
        await workflow.wait_condition(lambda: self.go)
        return await workflow.execute_activity(
            REBUILD_SCHEDULER, result_type=dict[str, int], start_to_close_timeout=timedelta(seconds=30)
        )

    @workflow.signal
    def rebuild(self) -> None:
        self.go = True


async def _listed(client: Client, workflow_ids: set[str]) -> None:
    """Wait until visibility lists every one of `workflow_ids` as running (it lags the start by a moment)."""
    query = "ExecutionStatus = 'Running'"
    for _ in range(300):
        running = {wf.id async for wf in client.list_workflows(query)}
        if workflow_ids <= running:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"visibility never listed {sorted(workflow_ids - running)}")


async def test_a_rebuilt_scheduler_asks_the_monitors_that_started_before_it_not_those_after() -> None:
    workflows = [CountingMonitor, CountingJob, EmptyScheduler]
    async with workflows_on_dev_server("rebuild", workflows, [rebuild_scheduler]) as (
        client,
        queue,
    ):
        tag = uuid.uuid4().hex[:6]
        before = await client.start_workflow(CountingMonitor.run, id=f"monitor-before-{tag}", task_queue=queue)
        await _listed(client, {before.id})
        scheduler = await client.start_workflow(EmptyScheduler.run, id=f"scheduler-{tag}", task_queue=queue)
        after = await client.start_workflow(CountingMonitor.run, id=f"monitor-after-{tag}", task_queue=queue)
        job = await client.start_workflow(CountingJob.run, id=f"job-after-{tag}", task_queue=queue)
        await _listed(client, {before.id, after.id, job.id})  # all listed: only the start time tells them apart

        await scheduler.signal(EmptyScheduler.rebuild)
        asked = await scheduler.result()

        assert asked == {"WorkerWorkflow": 1, "JobWorkflow": 1, "TaskWorkflow": 0}
        assert await before.query(CountingMonitor.times_asked) == 1
        assert await after.query(CountingMonitor.times_asked) == 0
        assert await job.query(CountingJob.times_asked) == 1  # a job run that started later may have continued as new
