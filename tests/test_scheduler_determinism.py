"""The scheduler's loop replays the same commands whenever its signals arrive.

A worker that caches no workflow replays the whole history on every workflow
task, so any command that depends on *when* a signal arrived (rather than on
what history records) fails a task as non-deterministic at once. The load
mixes what a scale-up produces: bursts of registrations (each owed a reply),
jobs that fit and jobs that never do (so passes run on the 1 s timer and
publish pending reasons), and completions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus, WorkflowQueryFailedError

from activities.contracts import DELIVER_SIGNALS, Delivery, Release
from activities.heartbeat import heartbeating, heartbeating_thread
from activities.proto import cluster_pb2 as pb
from activities.recovery import rebuild_scheduler
from activities.scheduling import FIND_ASSIGNMENTS, find_assignments_activity
from activities.signals import deliver_assignments, deliver_signals
from iris.controller.control_plane import controller_replayer, controller_runner, workflow_runner
from iris.controller.lookahead_guard import LookaheadRunner
from iris.controller.payload_guard import GuardedRunner
from iris.query_retry import CLOSED_RUN_REFUSED
from tests.support import workflow_settled, workflows_on_dev_server
from workflows.messages import Enqueue, SchedulingSpec
from workflows.scheduler.scheduler_close import CLOSE_SPLIT_AT
from workflows.scheduler.scheduler_reservations import RESERVATION_CHECK_SECONDS
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

BUDGET = 40  # signals per run in the budget tests (production: SIGNAL_BUDGET)
# Seconds a reply or reason delivery takes: longer than `_load` sends for (~2.5 s), so the whole burst lands while
# deliveries are out. (It was 9 s while deliveries were local activities, to outlast 80% of the workflow task's 10 s;
# they are regular activities now and hold no task open. It beats meanwhile, as the deliveries do: their heartbeat
# timeout is 5 s.)
SLOW_DELIVERY = 4.0
SPEC_FITS = SchedulingSpec(cpu_millis=100, memory_bytes=2**20)
SPEC_NEVER = SchedulingSpec(cpu_millis=10**9, memory_bytes=2**20)


def _batch(agent: int, hosts: int, round_: int) -> pb.WorkerBatch:
    batch = pb.WorkerBatch(reply_to=f"no-such-agent-{agent}-{round_}")  # a reply to nobody is dropped
    for host in range(hosts):
        meta = batch.workers.add(worker_id=f"a{agent}-h{host}", host="127.0.0.1", agent_session=f"s{agent}")
        meta.capacity.cpu_millis = 1000
        meta.capacity.memory_bytes = 2**30
    return batch


async def _load(client: Client, workflow_id: str) -> None:
    handle = client.get_workflow_handle(workflow_id)
    sends = []
    for round_ in range(12):
        for agent in range(6):
            sends.append(handle.signal("register_workers", _batch(agent, 4, round_)))
        for job in range(4):
            spec = SPEC_NEVER if job == 0 else SPEC_FITS
            job_id = f"job-{round_}-{job}"
            sends.append(handle.signal("enqueue", Enqueue(job_id, spec, {0: 0, 1: 0})))
        await asyncio.gather(*sends)
        sends.clear()
        await asyncio.sleep(0.15 * (round_ % 3))
        for job in range(1, 4):
            sends.append(handle.signal("release", Release(f"job-{max(0, round_ - 1)}-{job}", 0, 0)))
    await asyncio.gather(*sends)


@activity.defn(name=DELIVER_SIGNALS)
async def slow_deliver_signals(deliveries: list[Delivery], report_sent: bool = False) -> list[int] | dict[str, Any]:
    """Replies and reasons as slow as on a loaded controller."""
    typed = [d if isinstance(d, Delivery) else Delivery(**d) for d in deliveries]
    if any(d.signal != "assigned" for d in typed):
        await heartbeating(asyncio.sleep(SLOW_DELIVERY))
    return await deliver_signals(typed, report_sent)


async def test_signal_bursts_during_passes_replay_deterministically() -> None:
    activities = [find_assignments_activity, slow_deliver_signals, deliver_assignments, rebuild_scheduler]
    async with workflows_on_dev_server("sched-determinism", [SchedulerWorkflow], activities) as (client, queue):
        handle = await client.start_workflow(SchedulerWorkflow.run, id=queue, task_queue=queue)
        await _load(client, queue)
        await workflow_settled(handle)  # the last passes and replies
        failures = [
            WorkflowTaskFailedCause.Name(e.workflow_task_failed_event_attributes.cause)
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]  # e.g. FORCE_CLOSE_COMMAND: >100 signals came while a local activity held the task open
        assert [] == failures
        assert 24 == await _healthy(client, queue)  # every registration was applied once
        history = await handle.fetch_history()
        assert _signals_while_delivering(history.events) > 0  # what the slow deliveries are for
        await handle.terminate("test done")
    result = await controller_replayer([SchedulerWorkflow]).replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None


def _signals_while_delivering(events: Sequence[HistoryEvent]) -> int:
    """How many signals reached the run while one of its reply or reason deliveries was out."""
    out: set[int] = set()
    during = 0
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if e.activity_task_scheduled_event_attributes.activity_type.name == DELIVER_SIGNALS:
                out.add(e.event_id)
        elif e.event_type in ENDED:
            out.discard(getattr(e, ENDED[e.event_type]).scheduled_event_id)
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED and out:
            during += 1
    return during


ENDED = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled_event_attributes",
}


async def _healthy(client: Client, workflow_id: str) -> int:
    return int(await client.get_workflow_handle(workflow_id).query("healthy_worker_count"))


@pytest.mark.parametrize("ran_the_closed_run", [True, False], ids=["its-controller", "another-controller"])
async def test_a_run_continues_as_new_after_its_signal_budget(ran_the_closed_run: bool) -> None:
    """Past SIGNAL_BUDGET received signals the scheduler starts a new run carrying every worker.

    (The server refuses signals past a per-run limit; the budget keeps every run well below it.) A query that
    reaches a closed run (one without a run id can, while the next run starts) is refused by the controller that ran
    it, and asked again of the current run (iris/controller/closed_run_guard.py); a controller that knows nothing of
    it (without that guard here) replays the run, which answers with the workers it handed over.
    """
    activities = [find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler]
    runner = controller_runner() if ran_the_closed_run else GuardedRunner(LookaheadRunner(workflow_runner()))
    async with workflows_on_dev_server("sched-budget", [SchedulerWorkflow], activities, runner=runner) as (
        client, queue,
    ):  # fmt: skip
        await client.start_workflow(SchedulerWorkflow.run, args=[None, BUDGET], id=queue, task_queue=queue)
        handle = client.get_workflow_handle(queue)
        for agent in range(100):
            await handle.signal("register_workers", _batch(agent, 1, 0))
        for _ in range(100):
            if await _healthy(client, queue) == 100:
                break
            await asyncio.sleep(0.1)
        assert 100 == await _healthy(client, queue)
        runs: list[WorkflowExecution] = []
        for _ in range(100):  # visibility lists a closed run a moment after it closed
            runs = [wf async for wf in client.list_workflows(f"WorkflowId='{queue}'")]
            if len(runs) >= 2:
                break
            await asyncio.sleep(0.1)
        assert len(runs) >= 2, runs
        # A run that continued as new let go of its state (so it is freed at once), yet a query that reaches it
        # gets its workers, or is refused to be asked again of the current run by the controller that ran it.
        bare = Client(client.service_client, namespace=client.namespace)  # no retry: a refusal is seen
        for wf in runs:
            if wf.status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                closed = bare.get_workflow_handle(queue, run_id=wf.run_id)
                if ran_the_closed_run:
                    with pytest.raises(WorkflowQueryFailedError, match=CLOSED_RUN_REFUSED):
                        await closed.query("healthy_worker_count")
                    continue
                assert await closed.query("healthy_worker_count") > 0, wf.run_id
                summary = await closed.query("summary", result_type=pb.ClusterSummary)  # the counts handed over
                assert summary.total_workers == summary.healthy_workers > 0, wf.run_id
        assert 100 == await _healthy(client, queue)  # asked without a run id: the current run answers
        await handle.terminate("test done")


async def test_signals_that_come_while_a_run_closes_are_in_the_next_run() -> None:
    """Registrations sent without a pause until the first run has closed at its budget: every host is in the run
    after. The run, its state large, packed it and handed it over only on a later wake, so what came in meanwhile was
    applied and packed again (`STALE`) rather than lost, and the server could refuse a close only for what came in
    during a task that packs nothing. The closed run replays."""
    activities = [find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler]
    async with workflows_on_dev_server("sched-close", [SchedulerWorkflow], activities) as (client, queue):
        # The close's wait after a pack 0.5 s, not 1 ms, so signals certainly come in while it waits.
        args = [None, BUDGET, RESERVATION_CHECK_SECONDS, 0.5]
        started = await client.start_workflow(SchedulerWorkflow.run, args=args, id=queue, task_queue=queue)
        first = client.get_workflow_handle(queue, run_id=started.first_execution_run_id)
        handle = client.get_workflow_handle(queue)
        # A queue large enough that the pack is handed over in a task of its own (a small state packs and closes in
        # one).
        await handle.signal("enqueue", Enqueue("big", SPEC_NEVER, dict.fromkeys(range(CLOSE_SPLIT_AT), 0)))
        hosts = 0
        while (await first.describe()).status == WorkflowExecutionStatus.RUNNING:
            for _ in range(10):
                await handle.signal("register_workers", _batch(hosts, 1, 0))
                hosts += 1
        for _ in range(100):  # the run after the close (no signal comes any more: a host missing now is lost)
            if await _healthy(client, queue) == hosts:
                break
            await asyncio.sleep(0.1)
        assert hosts == await _healthy(client, queue)
        history = await first.fetch_history()
        await handle.terminate("test done")
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW == kinds[-1]
    assert _tasks_after_budget(kinds) >= 2, "packed, then handed over on a later wake"
    await controller_replayer().replay_workflow(history)


def _tasks_after_budget(kinds: Sequence[EventType.ValueType]) -> int:
    """Workflow tasks completed from the signal that spent the run's budget (BUDGET) to its close."""
    signaled = [i for i, kind in enumerate(kinds) if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    return kinds[signaled[BUDGET - 1]:].count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)


async def test_a_pack_made_before_a_replay_is_handed_over_whole() -> None:
    """A worker that keeps no run in its cache replays the run at every workflow task, so the task that hands the
    pack over replays the one that packed it: the state is packed again there, and the next run has all of it.
    (The pack is not built on replay, where history holds the close's input: the hand-over had sent an empty one,
    and the next run started with nothing.)"""
    activities = [find_assignments_activity, deliver_signals, deliver_assignments, rebuild_scheduler]
    async with workflows_on_dev_server(
        "sched-replayed-pack", [SchedulerWorkflow], activities, max_cached_workflows=0
    ) as (client, queue):  # fmt: skip
        started = await client.start_workflow(SchedulerWorkflow.run, args=[None, BUDGET], id=queue, task_queue=queue)
        first = client.get_workflow_handle(queue, run_id=started.first_execution_run_id)
        handle = client.get_workflow_handle(queue)
        await handle.signal("enqueue", Enqueue("big", SPEC_NEVER, dict.fromkeys(range(CLOSE_SPLIT_AT), 0)))
        for host in range(BUDGET - 1):  # the budget spent: the run packs, and hands over on its next quiet wake
            await handle.signal("register_workers", _batch(host, 1, 0))
        for _ in range(300):
            if (await first.describe()).status != WorkflowExecutionStatus.RUNNING:
                break
            await asyncio.sleep(0.1)
        summary = pb.ClusterSummary()
        for _ in range(100):
            summary = await handle.query("summary", result_type=pb.ClusterSummary)
            if summary.healthy_workers == BUDGET - 1:
                break
            await asyncio.sleep(0.1)
        history = await first.fetch_history()
        await handle.terminate("test done")
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW == history.events[-1].event_type
    carried = history.events[-1].workflow_execution_continued_as_new_event_attributes.input.payloads[0].data
    assert carried, "the close handed over an empty pack"
    assert (BUDGET - 1, CLOSE_SPLIT_AT) == (summary.healthy_workers, summary.pending_tasks)


SLOW_PASS = 5.0


@activity.defn(name=FIND_ASSIGNMENTS)
def _first_pass_slow(snapshot: bytes) -> bytes:
    """The real pass; the first one of a test takes SLOW_PASS seconds longer (a loaded controller)."""
    if not getattr(_first_pass_slow, "done", False):
        _first_pass_slow.done = True  # type: ignore[attr-defined]
        with heartbeating_thread():  # beating, as the real pass does while it computes
            time.sleep(SLOW_PASS)
    return find_assignments_activity(snapshot)  # type: ignore[no-any-return]


async def test_a_run_whose_budget_is_spent_during_a_pass_continues_as_new_without_waiting_for_it() -> None:
    """Signals pouring in during a slow pass: the run continues as new at its budget, the next run places the work.

    Waiting for the pass let one run take in an enqueue storm past the server's per-run signal limit.
    """
    activities = [_first_pass_slow, deliver_signals, deliver_assignments, rebuild_scheduler]
    async with workflows_on_dev_server("sched-pass", [SchedulerWorkflow], activities) as (client, queue):
        started = await client.start_workflow(SchedulerWorkflow.run, args=[None, BUDGET], id=queue, task_queue=queue)
        handle = client.get_workflow_handle(queue)
        await handle.signal("register_workers", _batch(0, 2, 0))
        await handle.signal("enqueue", Enqueue("job-0", SPEC_FITS, {0: 0, 1: 0}))
        await asyncio.sleep(1.0)  # the first pass is under way (and slow)
        for agent in range(1, 121):  # 3x the budget, all while the first pass runs
            await handle.signal("register_workers", _batch(agent, 1, 0))
        for _ in range(100):  # placed (then given back: these tasks have no workflow to tell)
            summary = await handle.query("summary", result_type=pb.ClusterSummary)
            if summary.pending_tasks == 0:
                break
            await asyncio.sleep(0.2)
        first = client.get_workflow_handle(queue, run_id=started.first_execution_run_id)
        history = [e async for e in first.fetch_history_events()]
        await handle.terminate("test done")
    assert 0 == summary.pending_tasks, summary
    signals = [e for e in history if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    assert BUDGET <= len(signals) < 2 * BUDGET, f"the first run took {len(signals)} signals (budget {BUDGET})"
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW == history[-1].event_type
    passes = {e.event_id for e in history if e.activity_task_scheduled_event_attributes.activity_type.name
          == FIND_ASSIGNMENTS}  # fmt: skip
    finished = [e for e in history if e.activity_task_completed_event_attributes.scheduled_event_id in passes]
    assert passes and not finished  # the first run did not wait for its pass
