"""A storm of enqueues goes to the scheduler as updates, and its runs continue as new in the middle of it.

A signal that comes in while a run's workflow task continues as new makes the server refuse the close; the run
replays whole to take it first (~1.2 s at 30,000 workers). An update does not: the server hands one it had not
delivered to the next run, and the run refuses one delivered to its last task (activities/coalescer.py).
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from activities import coalescer as coalescer_module
from activities.coalescer import UPDATE_FROM, SignalCoalescer
from activities.contracts import ENQUEUE_BATCH
from activities.contracts.queueing import EnqueueBatch
from activities.heartbeat import heartbeating
from activities.proto import cluster_pb2 as pb
from activities.recovery import rebuild_scheduler
from activities.scheduling import FIND_ASSIGNMENTS, find_assignments_activity
from tests.support import workflows_on_dev_server
from tests.test_release_batch import announced_to_tasks_that_exist, tasks_that_exist
from tests.test_scheduler_determinism import SPEC_NEVER
from workflows.messages import Enqueue
from workflows.scheduler.scheduler_carry import pack
from workflows.scheduler.scheduler_state import SchedulerState
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

ACTIVITIES = [find_assignments_activity, tasks_that_exist, announced_to_tasks_that_exist, rebuild_scheduler]


@activity.defn(name=FIND_ASSIGNMENTS)
async def _pass_outlasting_the_storm(snapshot: bytes) -> bytes:
    """A pass still under way when the test ends: a pass ending while a run continues as new also makes the server
    refuse that close (its completion comes in meanwhile), whatever the storm sends; this test is about the storm."""
    await heartbeating(asyncio.sleep(60))
    raise AssertionError("the test ended long before")


STORM_ACTIVITIES = [_pass_outlasting_the_storm, tasks_that_exist, announced_to_tasks_that_exist, rebuild_scheduler]
JOBS = 240
BATCH = 4  # enqueues per update: 60 updates, one on its way at a time
BUDGET = 8  # signals and updates per run: a run continues as new every few batches


def _coalescer(client: Client, workflow_id: str, update_from: int = UPDATE_FROM) -> SignalCoalescer:
    """The controller's enqueue coalescer (activities.signals.coalescer) with batches of BATCH."""
    return SignalCoalescer(client, workflow_id, ENQUEUE_BATCH, BATCH, pack=EnqueueBatch.of, update=ENQUEUE_BATCH,
                           update_from=update_from)  # fmt: skip


async def _runs(client: Client, workflow_id: str, first_run: str) -> list[list[HistoryEvent]]:
    """Every run's history, first to the one still running, following continue-as-new."""
    runs, run_id = [], first_run
    while run_id:
        events = [e async for e in client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history_events()]
        runs.append(events)
        last = events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            else ""
        )
    return runs


async def _pending(client: Client, workflow_id: str, expected: int) -> int:
    pending = -1
    for _ in range(150):
        summary = await client.get_workflow_handle(workflow_id).query("summary", result_type=pb.ClusterSummary)
        pending = summary.pending_tasks
        if pending == expected:
            break
        await asyncio.sleep(0.1)
    return pending


async def test_runs_continue_as_new_through_a_storm_of_enqueue_updates_and_lose_none() -> None:
    async with workflows_on_dev_server("sched-storm", [SchedulerWorkflow], STORM_ACTIVITIES) as (client, queue):
        # Handed an (empty) state, as a run that continued as new: one handed none asks the fleet to report, and
        # that activity's end coming in as the first run closes makes the server refuse the close too.
        started = await client.start_workflow(SchedulerWorkflow.run, args=[pack(SchedulerState()), BUDGET], id=queue,
                                              task_queue=queue)  # fmt: skip
        storm = _coalescer(client, queue, update_from=BATCH)  # every batch is a storm's
        await asyncio.gather(*(storm.send(Enqueue(f"job-{j:03d}", SPEC_NEVER, {0: 0})) for j in range(JOBS)))
        pending = await _pending(client, queue, JOBS)
        runs = await _runs(client, queue, started.first_execution_run_id)
        await client.get_workflow_handle(queue).terminate("test done")
    assert pending == JOBS  # every enqueue landed once, in whichever run took it
    events = [e for run in runs for e in run]
    updates = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]
    signals = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    unhandled = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
    refused_closes = [e for e in events if e.workflow_task_failed_event_attributes.cause == unhandled]
    assert not refused_closes, f"{len(refused_closes)} closes refused: something came in as a signal"
    assert len(updates) >= JOBS // BATCH and not signals  # batches of BATCH, each an update (none timed out)
    assert len(runs) >= 4, f"{len(runs)} runs: the storm should span several closes"


async def test_an_update_the_scheduler_does_not_take_in_time_goes_as_a_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduler whose controller is gone cannot take an update; the batch must not wait for it: it goes as a
    signal, recorded at once (and taken when a controller comes back; enqueues are idempotent)."""
    monkeypatch.setattr(coalescer_module, "UPDATE_PATIENCE", 1.0)
    async with workflows_on_dev_server("sched-enqueue-stuck", [SchedulerWorkflow], ACTIVITIES) as (client, queue):
        stuck = f"{queue}-unserved"  # no worker polls its queue
        handle = await client.start_workflow("SchedulerWorkflow", id=stuck, task_queue=stuck)
        storm = _coalescer(client, stuck, update_from=BATCH)
        await asyncio.gather(*(storm.send(Enqueue(f"job-{j}", SPEC_NEVER, {0: 0})) for j in range(BATCH)))
        events = [e async for e in handle.fetch_history_events()]
        await handle.terminate("test done")
    signals = [e.workflow_execution_signaled_event_attributes for e in events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]  # fmt: skip
    assert [s.signal_name for s in signals] == [ENQUEUE_BATCH]
    sent = client.data_converter.payload_converter.from_payload(signals[0].input.payloads[0], EnqueueBatch)
    assert sent.job_ids == [f"job-{j}" for j in range(BATCH)]  # the batch went whole, as one signal


async def test_a_few_enqueues_go_as_a_signal_a_storms_as_updates_and_an_unreadable_update_fails_alone() -> None:
    async with workflows_on_dev_server("sched-enqueue-modes", [SchedulerWorkflow], ACTIVITIES) as (client, queue):
        await client.start_workflow(SchedulerWorkflow.run, args=[None, 100], id=queue, task_queue=queue)
        handle = client.get_workflow_handle(queue)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(ENQUEUE_BATCH, "not an enqueue batch")
        few = _coalescer(client, queue)  # BATCH at once is no storm
        await asyncio.gather(*(few.send(Enqueue(f"few-{j}", SPEC_NEVER, {0: 0})) for j in range(BATCH)))
        storm = _coalescer(client, queue, update_from=BATCH)
        await asyncio.gather(*(storm.send(Enqueue(f"storm-{j}", SPEC_NEVER, {0: 0})) for j in range(BATCH)))
        pending = await _pending(client, queue, 2 * BATCH)
        events = [e async for e in handle.fetch_history_events()]
        await handle.terminate("test done")
    assert isinstance(refused.value.cause, ApplicationError)
    assert refused.value.cause.type == "UnreadablePayload", refused.value.cause
    assert "enqueue_batch" in str(refused.value.cause)
    assert pending == 2 * BATCH  # the scheduler went on, and took both
    signals = [e.workflow_execution_signaled_event_attributes.signal_name for e in events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]  # fmt: skip
    accepted = [e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name for e in events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]  # fmt: skip
    # The unreadable one was accepted too: it is read by the handler, after the acceptance, and fails there.
    assert signals == [ENQUEUE_BATCH] and accepted == [ENQUEUE_BATCH] * 2
