"""An attempt's lease heartbeat brings a kill to it, and notices it is gone, without waiting for the SDK.

The SDK forwards an activity's heartbeats at most every 0.8 x its heartbeat timeout and learns a cancel only
from the answer to one of those. The agent's lease sends its own heartbeats every lease interval and reads
the server's answer (worker_agent/leases/lease.py): that is what stops a killed attempt. Here the heartbeat timeout
is 60 s, so the SDK would learn nothing for 48 s; the lease's beats come every 0.5 s.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ActivityError
from temporalio.worker import UnsandboxedWorkflowRunner

from tests.support import workflows_on_dev_server
from worker_agent.leases.lease import AttemptLease, Beat
from worker_agent.leases.lease_settings import LeaseSettings

SDK_BLIND = timedelta(seconds=60)  # the SDK forwards a heartbeat (and hears a cancel) at most every 48 s
SETTINGS = LeaseSettings(seconds=1.5)  # a beat every 0.5 s
WITHIN = 15.0  # far below what the SDK would take
started: dict[str, asyncio.Event] = {}
ended: dict[str, asyncio.Future[Beat | None]] = {}


@activity.defn
async def leased_attempt(key: str) -> str:
    """Beats its lease until the lease says stop (or the SDK cancels it); says which, here and in `ended`."""
    lease = AttemptLease(activity.client(), SETTINGS, fenced=True)
    stopped = asyncio.Event()
    lease.stop = stopped.set
    beating = asyncio.create_task(lease.run())
    await lease.fresh()  # a heartbeat recorded: the SDK's first went out with it, its next waits 48 s
    started[key].set()
    try:
        await stopped.wait()
        ended[key].set_result(lease.ended)
        return f"stopped by its lease: {lease.ended}"
    except asyncio.CancelledError:
        ended[key].set_result(None)
        raise
    finally:
        beating.cancel()


@workflow.defn(versioning_behavior=VersioningBehavior.PINNED)
class CancelsItsAttempt:
    @workflow.run
    async def run(self, key: str, cancel: bool) -> str:
        handle = workflow.start_activity(
            leased_attempt, key, start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=SDK_BLIND,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )  # fmt: skip
        if not cancel:
            return await handle
        await workflow.sleep(1)
        handle.cancel()
        try:
            return await handle
        except ActivityError as err:
            return f"ended: {err.cause}"


async def test_a_cancelled_attempt_is_stopped_by_its_lease_and_a_gone_one_too() -> None:
    """A workflow cancels its attempt: the lease's next beat stops it (the SDK, deaf for 48 s, did not).
    A workflow terminated under its attempt: the lease's next beat finds the attempt gone and stops it."""
    async with workflows_on_dev_server("lease-stops", [CancelsItsAttempt], [leased_attempt],
                                       UnsandboxedWorkflowRunner()) as (client, queue):  # fmt: skip
        for key in ("cancelled", "gone"):
            started[key], ended[key] = asyncio.Event(), asyncio.get_running_loop().create_future()
        result = await asyncio.wait_for(
            client.execute_workflow(CancelsItsAttempt.run, args=["cancelled", True], id=f"{queue}-c", task_queue=queue),
            WITHIN,
        )
        assert f"stopped by its lease: {Beat.CANCELLED}" == result
        handle = await client.start_workflow(
            CancelsItsAttempt.run, args=["gone", False], id=f"{queue}-g-{uuid.uuid4().hex[:4]}", task_queue=queue
        )
        await asyncio.wait_for(started["gone"].wait(), WITHIN)
        await asyncio.sleep(1.0)  # past the SDK's first heartbeat
        await handle.terminate("test: the attempt's workflow ends under it")
        assert Beat.GONE == await asyncio.wait_for(ended["gone"], WITHIN)
