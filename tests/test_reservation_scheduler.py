"""The scheduler workflow holds a reservation, publishes it in its memo, keeps it across continue-as-new, frees it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio.client import Client

from activities.contracts import FIND_ENDED_JOBS, RELEASE_RESERVATION, RESERVATIONS_MEMO, RESERVE, WORKER_LOST
from activities.recovery import rebuild_scheduler
from activities.reservations import find_ended_jobs
from activities.scheduling import find_assignments_activity
from activities.signals import deliver_assignments, deliver_signals
from iris.client.reservation_requests import ReservationStatus, parse_published
from iris.controller.control_plane import controller_replayer
from tests.support import workflows_on_dev_server
from tests.test_scheduler_determinism import _batch
from workflows.messages import Reserve, WorkerLost
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

BUDGET = 30  # signals per run: a few registrations force continue-as-new


async def _published(client: Client, workflow_id: str) -> list[ReservationStatus]:
    description = await client.get_workflow_handle(workflow_id).describe()
    return parse_published(await description.memo_value(RESERVATIONS_MEMO, default=None))


async def _until(client: Client, workflow_id: str, wanted: Any, timeout: float = 30.0) -> list[ReservationStatus]:
    for _ in range(int(timeout / 0.2)):
        shown = await _published(client, workflow_id)
        if wanted(shown):
            return shown
        await asyncio.sleep(0.2)
    raise AssertionError(f"memo never showed what was wanted; last: {shown}")


async def test_reservation_is_held_published_kept_across_continue_as_new_replaced_and_released() -> None:
    """Held on two of three workers and published; a new run still holds it; a lost worker is replaced; released."""
    activities: list[Callable[..., Any]] = [
        find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler,
    ]
    async with workflows_on_dev_server("sched-rsv", [SchedulerWorkflow], activities) as (client, queue):
        started = await client.start_workflow(SchedulerWorkflow.run, args=[None, BUDGET], id=queue, task_queue=queue)
        handle = client.get_workflow_handle(queue)
        await handle.signal("register_workers", _batch(0, 3, 0))
        await handle.signal(RESERVE, Reserve("coord", [[1000, 2**30, 0, 0]] * 2, user="ana"))
        [held] = await _until(client, queue, lambda shown: shown and shown[0].held == 2)
        assert ("rsv-coord", "coord", "HELD") == (held.reservation_id, held.job_id, held.state)
        workers = {w.worker_id for w in held.workers}
        for agent in range(1, 2 * BUDGET):  # more signals than a run takes: it continues as new
            await handle.signal("register_workers", _batch(agent, 1, 0))
        runs = [wf async for wf in client.list_workflows(f"WorkflowId='{queue}'")]
        assert len(runs) >= 2, runs
        assert started.result_run_id != (await handle.describe()).run_id
        # The new run publishes in its first workflow task; describing it may come before that task.
        [kept] = await _until(client, queue, lambda shown: shown)
        assert workers == {w.worker_id for w in kept.workers}
        lost = sorted(workers)[0]
        await handle.signal(WORKER_LOST, WorkerLost(lost, "s0", "test"))
        [replaced] = await _until(client, queue, lambda s: s and s[0].held == 2 and lost not in {
            w.worker_id for w in s[0].workers})  # fmt: skip
        assert 2 == len(replaced.workers)
        await handle.signal(RELEASE_RESERVATION, "coord")
        assert [] == await _until(client, queue, lambda shown: shown == [])
        history = await handle.fetch_history()  # the last run: holds, a lost worker, a replacement, the release
        await handle.terminate("test done")
    replayed = await controller_replayer([SchedulerWorkflow]).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None


async def test_reservation_of_a_job_that_ended_without_releasing_it_is_released() -> None:
    """A reserving job terminated from outside cannot release; the scheduler finds it ended and releases it."""
    activities: list[Callable[..., Any]] = [
        find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler, find_ended_jobs,
    ]
    async with workflows_on_dev_server("sched-rsv-gone", [SchedulerWorkflow], activities) as (client, queue):
        await client.start_workflow(SchedulerWorkflow.run, args=[None, 1000, 3.0], id=queue, task_queue=queue)
        handle = client.get_workflow_handle(queue)
        await handle.signal("register_workers", _batch(0, 2, 0))
        await handle.signal(RESERVE, Reserve("never-started", [[1000, 2**30, 0, 0]], user="ana"))
        await _until(client, queue, lambda shown: shown and shown[0].held == 1)
        assert [] == await _until(client, queue, lambda shown: shown == [])
        history = [e async for e in handle.fetch_history_events()]
        assert any(e.activity_task_scheduled_event_attributes.activity_type.name == FIND_ENDED_JOBS for e in history)
        await handle.terminate("test done")
