"""An assignment whose task is slow to start is delivered apart from the scheduler's loop, and a task
that still is not there after the scheduler's patience goes back to the queue, not out of it.

The announcement and delivery activities are stand-ins that report what a real delivery would
(the task is late, then late again, then there): the scheduler workflow is real, on a dev server.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.client import Client

from activities.contracts import DELIVER_ASSIGNMENTS, DELIVER_SIGNALS, Delivery, DeliveryOutcome
from activities.contracts.announcing import AssignmentBatch
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from tests.support import workflows_on_dev_server
from tests.test_scheduler_determinism import SPEC_FITS, _batch
from workflows.messages import Enqueue
from workflows.scheduler.scheduler_delivery import ANNOUNCE_GRACE_SECONDS, LATE_PATIENCE_SECONDS
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

announced: list[tuple[str, float]] = []  # (task, patience) for each assignment the scheduler sent


@activity.defn(name=DELIVER_ASSIGNMENTS)
async def slow_task(deliveries: AssignmentBatch, patience: float) -> DeliveryOutcome:
    """The task is not there for the first two tries (the announcement's grace, then the background's
    patience); it has started by the third."""
    announced.extend((d.workflow_id, patience) for d in deliveries.deliveries())
    return DeliveryOutcome(late=list(range(len(deliveries)))) if len(announced) <= 2 else DeliveryOutcome()


@activity.defn(name=DELIVER_SIGNALS)
async def delivered(deliveries: list[Delivery], report_sent: bool = False) -> list[int] | dict[str, Any]:
    return {"gone": [], "sent": len(deliveries)} if report_sent else []


async def _placed(client: Client, workflow_id: str) -> list[str]:
    workers = await client.get_workflow_handle(workflow_id).query("workers")
    return sorted(key for w in workers.workers for key in w.running_tasks)


async def test_a_task_still_missing_after_the_patience_is_queued_again_and_placed_when_it_comes() -> None:
    activities = [find_assignments_activity, slow_task, delivered, rebuild_scheduler]
    async with workflows_on_dev_server("sched-late", [SchedulerWorkflow], activities) as (client, queue):
        handle = await client.start_workflow(SchedulerWorkflow.run, id=queue, task_queue=queue)
        await handle.signal("register_workers", _batch(0, 1, 0))
        await handle.signal("enqueue", Enqueue("slow", SPEC_FITS, {0: 0}))
        for _ in range(100):
            if len(announced) >= 3:
                break
            await asyncio.sleep(0.1)
        grace, patience = ANNOUNCE_GRACE_SECONDS, LATE_PATIENCE_SECONDS
        assert [("slow/task-0", grace), ("slow/task-0", patience), ("slow/task-0", grace)] == announced
        assert ["slow/task-0"] == await _placed(client, queue)  # placed again, and this time told
        summary = await handle.query("summary")
        assert 0 == summary.pending_tasks
        await handle.terminate("test over")
