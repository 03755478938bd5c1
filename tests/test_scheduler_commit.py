"""The scheduler workflow's commit step: a plan is re-checked against the state as it is now."""

from __future__ import annotations

from activities.proto import cluster_pb2 as pb
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import SchedulingSpec
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.scheduler_queue import Queue
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry, committed
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow


def _state(group_by: str = "", tasks: int = 2) -> SchedulerState:
    workers = {f"w{i}": WorkerEntry(f"w{i}", "s", 1000, 2**30, 0, 0, {"slice": "a"}) for i in range(tasks)}
    spec = SchedulingSpec(cpu_millis=1000, memory_bytes=2**20, group_by=group_by)
    return SchedulerState(workers=workers, pending={"j": PendingEntry("j", spec, dict.fromkeys(range(tasks), 0), 0.0)})


def _plan(tasks: int = 2) -> pb.SchedulingPlan:
    plan = pb.SchedulingPlan()
    for i in range(tasks):
        plan.assignments.add(job_id="j", task_index=i, worker_id=f"w{i}")
    return plan


def _scheduler(state: SchedulerState) -> Queue:
    """The scheduler's queue and commit on `state`, outside a workflow (its clock fixed)."""
    scheduler = SchedulerWorkflow()
    scheduler.state = state
    scheduler.core.clock = lambda: 0.0
    return scheduler.queue


def test_plain_job_commits_what_still_fits() -> None:
    """A worker lost while the plan was computed gets nothing; the other placement is committed."""
    state = _state()
    state.workers["w1"].state = WorkerState.LOST
    accepted = _scheduler(state).commit(_plan(), now=0.0)
    assert ["j/task-0"] == [key for key, _, _ in accepted]
    assert {"j/task-0"} == set(state.placements)
    assert {1: 0} == state.pending["j"].attempts


def test_gang_commits_all_or_nothing() -> None:
    """When one member's worker was lost meanwhile, no member of the gang is committed."""
    state = _state(group_by="slice", tasks=4)
    state.workers["w2"].state = WorkerState.LOST
    accepted = _scheduler(state).commit(_plan(4), now=0.0)
    assert [] == accepted
    assert {} == state.placements
    assert {0: 0, 1: 0, 2: 0, 3: 0} == state.pending["j"].attempts


def test_capacity_taken_meanwhile_is_not_committed_twice() -> None:
    """A placement that appeared while the plan was computed counts against the worker's capacity."""
    state = _state()
    state.placements["k/task-0"] = Placement("k", 0, 0, "w0", 1000, 2**20, 0, 0)
    accepted = _scheduler(state).commit(_plan(), now=0.0)
    assert ["j/task-1"] == [key for key, _, _ in accepted]


def test_whole_gang_committed_when_everything_still_holds() -> None:
    """With nothing changed, every member is placed and the job leaves the queue."""
    state = _state(group_by="slice", tasks=4)
    accepted = _scheduler(state).commit(_plan(4), now=0.0)
    assert [f"w{i}" for i in range(4)] == [assigned.worker_id for _, assigned, _ in accepted]
    assert "j" not in state.pending


def test_a_plan_committed_batch_by_batch_never_places_twice_on_one_worker() -> None:
    """The announcement commits a job batch at a time with one running count of what is used: a gang
    committed in one batch counts in the next, so a later job planned on the same workers waits."""
    state = _state(group_by="slice", tasks=2)
    state.pending["k"] = PendingEntry("k", SchedulingSpec(cpu_millis=1000, memory_bytes=2**20), {0: 0}, 0.0)
    plan = _plan(2)
    plan.assignments.add(job_id="k", task_index=0, worker_id="w1")  # planned stale: w1 is the gang's now
    scheduler = _scheduler(state)
    used = committed(state)
    first = scheduler.commit(plan, now=0.0, jobs={"j": list(plan.assignments)[:2]}, used=used)
    second = scheduler.commit(plan, now=0.0, jobs={"k": list(plan.assignments)[2:]}, used=used)
    assert (2, []) == (len(first), second)
    assert {"w0": [1000, 2**20, 0, 0], "w1": [1000, 2**20, 0, 0]} == used == committed(state)


def test_a_gang_that_does_not_fit_leaves_the_running_count_as_it_was() -> None:
    """A gang refused (one member's worker full meanwhile) books nothing in the caller's count of what is
    used; one placed whole adds to the rows of its workers only."""
    state = _state(group_by="slice", tasks=3)
    state.workers["w9"] = WorkerEntry("w9", "s", 1000, 2**30, 0, 0, {"slice": "a"})
    state.placements["k/task-0"] = Placement("k", 0, 0, "w2", 500, 2**20, 0, 0)
    scheduler = _scheduler(state)
    used = committed(state)
    assert [] == scheduler.commit(_plan(3), now=0.0, used=used)  # w2 has only 500 of 1000 left
    assert {"w2": [500, 2**20, 0, 0]} == used
    del state.placements["k/task-0"]
    used = {"w9": [0, 0, 0, 0]}
    assert 3 == len(scheduler.commit(_plan(3), now=0.0, used=used))
    assert {"w9": [0, 0, 0, 0], **{f"w{i}": [1000, 2**20, 0, 0] for i in range(3)}} == used
