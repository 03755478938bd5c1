"""An agent's coalesced releases free every place they name, and a full worker takes the next job."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.client import Client

from activities.coalescer import SignalCoalescer
from activities.contracts import (
    DELIVER_ASSIGNMENTS,
    DELIVER_SIGNALS,
    MAX_RELEASE_BATCH,
    RELEASE_BATCH,
    Delivery,
    DeliveryOutcome,
    Release,
)
from activities.contracts.announcing import AssignmentBatch
from activities.recovery import rebuild_scheduler
from activities.scheduling import find_assignments_activity
from tests.support import workflows_on_dev_server
from tests.test_scheduler_determinism import SPEC_FITS, _batch
from workflows.messages import Enqueue
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

SLOTS = 10  # the one worker's 1,000 millicpu / SPEC_FITS' 100


@activity.defn(name=DELIVER_SIGNALS)
async def tasks_that_exist(deliveries: list[Delivery], report_sent: bool = False) -> list[int] | dict[str, Any]:
    """Every task signalled is taken to be running: no task workflow here ends or goes missing."""
    return {"gone": [], "sent": len(deliveries)} if report_sent else []


@activity.defn(name=DELIVER_ASSIGNMENTS)
async def announced_to_tasks_that_exist(deliveries: AssignmentBatch, patience: float) -> DeliveryOutcome:
    """The scheduler's announcements, as `tasks_that_exist` treats them."""
    return DeliveryOutcome()


async def _running(client: Client, workflow_id: str) -> list[str]:
    workers = await client.get_workflow_handle(workflow_id).query("workers")
    return sorted(key for w in workers.workers for key in w.running_tasks)


async def _until(client: Client, workflow_id: str, expected: list[str]) -> list[str]:
    running: list[str] = []
    for _ in range(100):
        running = await _running(client, workflow_id)
        if running == expected:
            break
        await asyncio.sleep(0.1)
    return running


async def test_one_release_batch_frees_every_place_and_the_next_job_is_placed() -> None:
    activities = [find_assignments_activity, tasks_that_exist, announced_to_tasks_that_exist, rebuild_scheduler]
    async with workflows_on_dev_server("sched-release-batch", [SchedulerWorkflow], activities) as (client, queue):
        handle = await client.start_workflow(SchedulerWorkflow.run, id=queue, task_queue=queue)
        await handle.signal("register_workers", _batch(0, 1, 0))
        await handle.signal("enqueue", Enqueue("first", SPEC_FITS, dict.fromkeys(range(SLOTS), 0)))
        first = sorted(f"first/task-{i}" for i in range(SLOTS))
        assert first == await _until(client, queue, first)
        await handle.signal("enqueue", Enqueue("second", SPEC_FITS, dict.fromkeys(range(SLOTS), 0)))
        for _ in range(100):  # a pass has seen "second": the worker is full, so it waits, saying why
            if await handle.query("pending_reason", "second"):
                break
            await asyncio.sleep(0.1)
        assert await handle.query("pending_reason", "second")
        assert first == await _running(client, queue)

        coalescer = SignalCoalescer(client, queue, RELEASE_BATCH, MAX_RELEASE_BATCH)
        await asyncio.gather(*(coalescer.send(Release("first", i, 0)) for i in range(SLOTS)))
        second = sorted(f"second/task-{i}" for i in range(SLOTS))
        assert second == await _until(client, queue, second)
        signals = [
            e.workflow_execution_signaled_event_attributes.signal_name
            async for e in handle.fetch_history_events()
            if e.HasField("workflow_execution_signaled_event_attributes")
        ]
        await handle.terminate("test done")
    batches = [name for name in signals if name == RELEASE_BATCH]
    assert 1 <= len(batches) < SLOTS  # sent while one was on its way, the releases went together
