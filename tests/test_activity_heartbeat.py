"""The scheduler's long activities heartbeat, so a dead controller's pass is retried in seconds.

A heartbeat timeout far shorter than the work proves the beats arrive: without them the server
times the activity out (the control case), which is what retries a pass whose controller died.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import WorkflowFailureError
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError, TimeoutError, TimeoutType
from temporalio.worker import UnsandboxedWorkflowRunner

from activities.heartbeat import heartbeating, heartbeating_thread
from tests.support import workflows_on_dev_server

WORK_SECONDS = 2.5  # longer than the heartbeat timeout below, several beats long
BEAT = 0.2


@activity.defn
def computes_beating() -> str:
    """A sync pass that beats from a side thread while it computes."""
    with heartbeating_thread(every=BEAT):
        time.sleep(WORK_SECONDS)
    return "done"


@activity.defn
def computes_silently() -> str:
    """The same work without beats: the server takes it for dead."""
    time.sleep(WORK_SECONDS)
    return "done"


@activity.defn
async def awaits_beating() -> str:
    """An async delivery that beats while it awaits."""
    return await heartbeating(asyncio.sleep(WORK_SECONDS, "done"), every=BEAT)


@workflow.defn(versioning_behavior=VersioningBehavior.PINNED)
class OneActivity:
    @workflow.run
    async def run(self, name: str) -> str:
        result: str = await workflow.execute_activity(
            name, start_to_close_timeout=timedelta(seconds=30), heartbeat_timeout=timedelta(seconds=1),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )  # fmt: skip
        return result


async def test_beating_activities_outlive_a_heartbeat_timeout_shorter_than_their_work() -> None:
    """Sync and async activities that beat finish; one that does not is timed out by the server."""
    activities = [computes_beating, computes_silently, awaits_beating]
    # A test-only workflow: no sandbox needed to prove what the server sees.
    runner = UnsandboxedWorkflowRunner()
    async with workflows_on_dev_server("heartbeat", [OneActivity], activities, runner) as (client, queue):

        async def run(name: str) -> str:
            return await client.execute_workflow(OneActivity.run, name, id=f"{queue}-{name}", task_queue=queue)

        assert ["done", "done"] == await asyncio.gather(run("computes_beating"), run("awaits_beating"))
        with pytest.raises(WorkflowFailureError) as failed:
            await run("computes_silently")
        activity_failure = failed.value.cause
        assert isinstance(activity_failure, ActivityError)
        timeout = activity_failure.cause
        assert isinstance(timeout, TimeoutError)
        assert TimeoutType.HEARTBEAT == timeout.type
