"""A worker whose dispatches all time out at once is quarantined once, and the scheduler keeps scheduling."""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.contracts import Release
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from activities.signals import deliver_assignments, deliver_signals
from iris.controller.control_plane import controller_replayer
from tests.support import workflows_on_dev_server
from tests.test_release_batch import announced_to_tasks_that_exist, tasks_that_exist
from tests.test_scheduler_determinism import SPEC_FITS, SPEC_NEVER, _batch
from workflows.messages import Enqueue
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

BURST = 60  # dispatch failures at once: counted one doubling each, 30 s * 2**59 overflowed a timedelta


async def test_a_burst_of_dispatch_failures_is_one_incident_and_scheduling_goes_on() -> None:
    """60 tasks that timed out together on one worker: no failed workflow task, and the next job gets a pass."""
    activities = [find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler]
    async with workflows_on_dev_server("sched-quarantine", [SchedulerWorkflow], activities) as (client, queue):
        handle = await client.start_workflow(SchedulerWorkflow.run, id=queue, task_queue=queue)
        await handle.signal("register_workers", _batch(0, 1, 0))
        await asyncio.gather(*(
            handle.signal("release", Release("gone", i, 0, dispatch_failed_on="a0-h0")) for i in range(BURST)
        ))  # fmt: skip
        await handle.signal("enqueue", Enqueue("never-fits", SPEC_NEVER, {0: 0}))
        reason = ""
        for _ in range(100):
            reason = await handle.query("pending_reason", "never-fits")
            if reason:
                break
            await asyncio.sleep(0.1)
        failed = [
            e.event_id async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]  # fmt: skip
        history = await handle.fetch_history()
        await handle.terminate("test done")
    assert [] == failed
    assert reason, "no scheduling pass ran after the burst"
    replayed = await controller_replayer([SchedulerWorkflow]).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None  # the burst's history, patch marker included, replays


async def _placed(client: Client, workflow_id: str, job_id: str) -> bool:
    workers = await client.get_workflow_handle(workflow_id).query("workers")
    return any(key.startswith(f"{job_id}/") for w in workers.workers for key in w.running_tasks)


async def _reason(client: Client, workflow_id: str, job_id: str) -> str:
    reason = ""
    for _ in range(100):
        reason = await client.get_workflow_handle(workflow_id).query("pending_reason", job_id)
        if reason or await _placed(client, workflow_id, job_id):
            break
        await asyncio.sleep(0.1)
    return reason


async def test_a_dispatch_failure_of_an_earlier_agent_does_not_shut_out_the_restarted_one() -> None:
    """A task placed on an agent that died is not blamed on the agent that replaced it; one of its own is."""
    activities = [find_assignments_activity, tasks_that_exist, announced_to_tasks_that_exist, rebuild_scheduler]
    async with workflows_on_dev_server("sched-quarantine-session", [SchedulerWorkflow], activities) as (client, queue):
        handle = await client.start_workflow(SchedulerWorkflow.run, id=queue, task_queue=queue)
        await handle.signal("register_workers", _batch(0, 1, 0))  # worker a0-h0, agent session s0
        stale = Release("gone", 0, 0, dispatch_failed_on="a0-h0", dispatch_failed_session="s-before-restart")
        await handle.signal("release", stale)
        await handle.signal("enqueue", Enqueue("after-stale", SPEC_FITS, {0: 0}))
        stale_reason = await _reason(client, queue, "after-stale")
        placed_after_stale = await _placed(client, queue, "after-stale")
        own = Release("gone", 1, 0, dispatch_failed_on="a0-h0", dispatch_failed_session="s0")
        await handle.signal("release", own)
        await handle.signal("enqueue", Enqueue("after-own", SPEC_FITS, {0: 0}))
        own_reason = await _reason(client, queue, "after-own")
        placed_after_own = await _placed(client, queue, "after-own")
        await handle.terminate("test done")
    assert (True, "") == (placed_after_stale, stale_reason)
    assert not placed_after_own
    assert own_reason, "the job waits with a reason while its only worker is quarantined"
