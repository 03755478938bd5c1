"""A plan's assignments come in batches of whole jobs, which the scheduler commits one at a time."""

from __future__ import annotations

import copy

from activities.proto import cluster_pb2 as pb
from activities.proto import compressed, plan_batches
from activities.scheduling import find_assignments_activity
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import SchedulingSpec
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.scheduler_queue import Queue
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry, committed
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow
from workflows.scheduler.sharing_state import take_evictions
from workflows.scheduler.snapshot_cache import encode_snapshot

NOW = 1_000.0
GANG = "gang"


def _state() -> SchedulerState:
    """300 workers with room for 10 tasks each; 2,400 plain tasks in jobs of 7 and 13, and a gang of 60 hosts."""
    state = SchedulerState()
    for i in range(300):
        state.workers[f"w{i:03d}"] = WorkerEntry(f"w{i:03d}", "s", 1000, 1 << 30, 0, 0, {"pool": "a"})
    plain = SchedulingSpec(cpu_millis=100, memory_bytes=1 << 20)
    queued = 0
    job = 0
    while queued < 2_400:
        tasks = 7 if job % 2 else 13
        state.pending[f"j{job:04d}"] = PendingEntry(f"j{job:04d}", plain, dict.fromkeys(range(tasks), 0), NOW)
        queued += tasks
        job += 1
        if job == 100:  # the gang in the middle of the queue
            gang = SchedulingSpec(cpu_millis=100, memory_bytes=1 << 20, group_by="pool")
            state.pending[GANG] = PendingEntry(GANG, gang, dict.fromkeys(range(60), 0), NOW)
    return state


def _plan(state: SchedulerState) -> pb.SchedulingPlan:
    return pb.SchedulingPlan.FromString(compressed.decompress(find_assignments_activity(encode_snapshot(state, NOW))))


def _scheduler(state: SchedulerState) -> Queue:
    """The scheduler's queue and commit on `state`, outside a workflow (its clock fixed)."""
    scheduler = SchedulerWorkflow()
    scheduler.state = state
    scheduler.core.clock = lambda: NOW
    return scheduler.queue


def test_the_pass_cuts_its_plan_into_batches_of_whole_jobs() -> None:
    """Each job's assignments lie in one batch, together; a batch closes at the first job past ANNOUNCE_BATCH."""
    state = _state()
    plan = _plan(state)
    cuts = plan_batches.batches(plan)
    assert len(plan.assignments) == 2_460 and len(cuts) == 2  # everything fits: 2,400 plain and the gang of 60
    assert cuts[0][0] == 0 and cuts[-1][1] == len(plan.assignments)
    seen: dict[str, int] = {}
    order = []
    for number, (start, end) in enumerate(cuts):
        jobs = plan_batches.by_job(plan.assignments[start:end])
        for job_id, assignments in jobs.items():
            assert job_id not in seen, f"{job_id} split over batches"
            seen[job_id] = number
            order.append(job_id)
            assert len(assignments) == len(state.pending[job_id].attempts)
        if number < len(cuts) - 1:
            last = list(jobs.values())[-1]
            assert end - start - len(last) < plan_batches.ANNOUNCE_BATCH <= end - start
    assert list(state.pending) == order  # in the order the pass placed them
    assert plan_batches.held_back_from(plan) == len(plan.assignments)  # no preemptor: nothing held back


def test_committed_batch_by_batch_as_the_whole_plan_would_be_and_a_gang_whole_or_not_at_all() -> None:
    """The batches committed one after the other place what one commit of the whole plan places; a gang
    whose worker was lost meanwhile is committed nowhere, its tasks stay queued."""
    for lose in (None, "w150"):
        state = _state()
        plan = _plan(state)
        if lose is not None:
            state.workers[lose].state = WorkerState.LOST
        whole = copy.deepcopy(state)
        _scheduler(whole).commit(copy.deepcopy(plan), now=NOW, limit=None)
        scheduler = _scheduler(state)
        used = committed(state)
        for start, end in plan_batches.batches(plan):
            jobs = plan_batches.by_job(plan.assignments[start:end])
            scheduler.commit(plan, now=NOW, limit=None, jobs=jobs, used=used)
        assert whole.placements == state.placements and whole.pending == state.pending
        assert used == committed(state)
        gang = {key for key in state.placements if key.startswith(f"{GANG}/")}
        if lose is None:
            assert 60 == len(gang) and GANG not in state.pending
        else:
            planned_there = any(a.worker_id == lose for a in plan.assignments if a.job_id == GANG)
            assert planned_there  # the gang takes one task per worker of the pool, in order
            assert (set(), 60) == (gang, len(state.pending[GANG].attempts))


def test_a_preemptors_assignments_come_last_and_are_never_committed() -> None:
    """The activity puts them after the last batch; taking the evictions drops them and holds their workers."""
    plan = pb.SchedulingPlan()
    plan.evictions.add(job_id="victim", task_indices=[0, 1], band="batch", preemptor="p", reason="r")
    rows = [("a", 0, "w0"), ("p", 0, "w1"), ("b", 0, "w2"), ("a", 1, "w3"), ("p", 1, "w4"), ("c", 0, "w5")]
    plan_batches.fill(plan, rows, size=2)
    assert [("a", 0), ("a", 1), ("b", 0), ("c", 0), ("p", 0), ("p", 1)] == [
        (a.job_id, a.task_index) for a in plan.assignments
    ]
    assert [(0, 2), (2, 4)] == plan_batches.batches(plan)  # a's two tasks, then b and c
    state = SchedulerState()
    spec = SchedulingSpec(cpu_millis=100, memory_bytes=1 << 20)
    state.pending["p"] = PendingEntry("p", spec, {0: 0, 1: 0}, NOW)
    state.placements["victim/task-0"] = Placement("victim", 0, 0, "w1", 100, 1 << 20, 0, 0, band="batch")
    take_evictions(state.books, state, plan, NOW)
    assert 4 == len(plan.assignments) and [(0, 2), (2, 4)] == plan_batches.batches(plan)
    assert ["w1", "w4"] == state.books.holds["p"].workers


def test_a_plan_built_by_hand_is_cut_where_it_is_read() -> None:
    """A plan without batches (made by hand) is ordered job by job when the workflow first reads it."""
    plan = pb.SchedulingPlan()
    for job_id, index in [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("c", 0)]:
        plan.assignments.add(job_id=job_id, task_index=index, worker_id=f"w-{job_id}{index}")
    assert [(0, 5)] == plan_batches.batches(plan)
    assert ["a", "a", "b", "b", "c"] == [a.job_id for a in plan.assignments]
    assert ["w-a0", "w-a1", "w-b0", "w-b1", "w-c0"] == [a.worker_id for a in plan.assignments]
