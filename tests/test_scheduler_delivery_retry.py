"""A delivery whose controller died is sent again after the deliveries' heartbeat timeout, not after their
two-minute start-to-close: scheduling goes on within seconds of a controller's SIGKILL.

The first announcement stands for one running on a controller that was just killed: it never beats and
never ends. The scheduler workflow is real, on a dev server.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from temporalio import activity

from activities.contracts import DELIVER_ASSIGNMENTS, DELIVER_SIGNALS, Delivery, DeliveryOutcome
from activities.contracts.announcing import AssignmentBatch
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from tests.support import workflows_on_dev_server
from tests.test_scheduler_determinism import SPEC_FITS, _batch
from workflows.messages import Enqueue
from workflows.scheduler.scheduler_delivery import PASS_HEARTBEAT
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

tries: list[tuple[int, float]] = []  # (attempt, when) of each announcement
retried = asyncio.Event()  # the activities run on the test's event loop


@activity.defn(name=DELIVER_ASSIGNMENTS)
async def dies_first(deliveries: AssignmentBatch, patience: float) -> DeliveryOutcome:
    tries.append((activity.info().attempt, time.monotonic()))
    if activity.info().attempt > 1:
        retried.set()
    else:
        await asyncio.Event().wait()  # its controller is gone: no beat, no answer
    return DeliveryOutcome()


@activity.defn(name=DELIVER_SIGNALS)
async def delivered(deliveries: list[Delivery], report_sent: bool = False) -> list[int] | dict[str, Any]:
    return {"gone": [], "sent": len(deliveries)} if report_sent else []


async def test_an_announcement_lost_with_its_controller_is_sent_again_after_the_heartbeat_timeout() -> None:
    activities = [find_assignments_activity, dies_first, delivered, rebuild_scheduler]
    async with workflows_on_dev_server("sched-redeliver", [SchedulerWorkflow], activities) as (client, queue):
        handle = await client.start_workflow(SchedulerWorkflow.run, id=queue, task_queue=queue)
        await handle.signal("register_workers", _batch(0, 1, 0))
        await handle.signal("enqueue", Enqueue("j", SPEC_FITS, {0: 0}))
        with contextlib.suppress(TimeoutError):  # half the start-to-close: only the heartbeat timeout gets there
            await asyncio.wait_for(retried.wait(), 60)
        assert [1, 2] == [attempt for attempt, _ in tries[:2]], tries
        waited = tries[1][1] - tries[0][1]
        assert PASS_HEARTBEAT.total_seconds() <= waited + 0.5  # retried for its silence, not at once
        summary = await handle.query("summary")
        assert 1 == summary.running_tasks and 0 == summary.pending_tasks  # placed, and told the second time
        await handle.terminate("test over")
