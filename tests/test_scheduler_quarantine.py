"""A worker whose dispatches all time out at once is quarantined once, and the scheduler keeps scheduling."""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import EventType
from temporalio.worker import Replayer

from activities.contracts import Release
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from activities.signals import deliver_assignments, deliver_signals
from tests.support import workflows_on_dev_server
from tests.test_scheduler_determinism import SPEC_NEVER, _batch
from workflows.messages import Enqueue
from workflows.scheduler_workflow import SchedulerWorkflow

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
    replayed = await Replayer(workflows=[SchedulerWorkflow]).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None  # the burst's history, patch marker included, replays
