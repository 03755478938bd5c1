"""Throttled arrays (scheduler/throttle.py): a job's cap on tasks placed at once, enforced by the pass."""

from __future__ import annotations

from dataclasses import replace

from scheduler import find_assignments
from scheduler.autoscale import GroupShape, plan_scaling
from scheduler.types import Resources
from tests.scheduler.sched_helpers import GIB, job, placed, worker


def test_a_pass_places_no_more_than_the_cap_and_says_why_the_rest_wait() -> None:
    """With room for 16 tasks, a 100-task job capped at 4 gets 4 places; the other 96 wait for its cap."""
    workers = [worker(f"w{i}", cpu=8) for i in range(2)]
    result = find_assignments(workers, [job("arr", 100, max_concurrent=4)])
    assert 4 == len(placed(result, "arr"))
    assert "max_concurrent=4: 4 of its tasks placed at a time; 96 wait for one to end" == result.pending_reasons["arr"]


def test_tasks_already_placed_count_against_the_cap() -> None:
    """With 3 of its tasks running, a job capped at 4 gets one more place; at 4 it gets none, and says why."""
    workers = [worker("w0", cpu=8)]
    assert 1 == len(placed(find_assignments(workers, [job("arr", 10, max_concurrent=4, placed=3)]), "arr"))
    full = find_assignments(workers, [job("arr", 10, max_concurrent=4, placed=4)])
    assert {} == placed(full, "arr")
    assert "max_concurrent=4: 4 of its tasks placed at a time; 10 wait for one to end" == full.pending_reasons["arr"]


def test_a_capped_job_leaves_room_to_the_jobs_behind_it() -> None:
    """The places a capped job may not take go to the next job in the queue."""
    workers = [worker("w0", cpu=4)]
    result = find_assignments(workers, [job("arr", 10, max_concurrent=1), job("next", 5)])
    assert 1 == len(placed(result, "arr"))
    assert 3 == len(placed(result, "next"))


def test_when_the_fleet_is_short_too_both_reasons_are_given() -> None:
    """A capped job whose room under the cap does not fit either names the fleet's reason and its cap."""
    result = find_assignments([worker("w0", cpu=2)], [job("arr", 10, max_concurrent=4)])
    assert 2 == len(placed(result, "arr"))
    reason = result.pending_reasons["arr"]
    assert reason.startswith("placed 2 of 4 tasks; 0/1 workers")
    assert reason.endswith("max_concurrent=4: 4 of its tasks placed at a time; 6 wait for one to end")


def test_when_none_of_it_fits_the_fleet_alone_is_the_reason() -> None:
    """No task of the job placed: none can end to make room under the cap, so the reason is the fleet's."""
    result = find_assignments([worker("w0", cpu=0.5)], [job("arr", 10, max_concurrent=4)])
    assert 0 == len(placed(result, "arr"))
    reason = result.pending_reasons["arr"]
    assert "max_concurrent" not in reason and "wait for one to end" not in reason, reason
    assert reason.startswith("0/1 workers: 1 have < 1 free cpu"), reason


def test_waiting_for_its_own_cap_is_not_a_scheduling_timeout() -> None:
    """A throttled job past its scheduling timeout keeps its held-back tasks queued while some of it is placed."""
    workers = [worker("w0", cpu=8)]
    running = job("arr", 10, max_concurrent=2, placed=2, waited_seconds=100.0, scheduling_timeout_seconds=10.0)
    assert () == find_assignments(workers, [running]).timed_out
    idle = replace(running, placed=0)
    # Nothing of it placed: the fleet is the problem, for all of it (those behind the cap timed out later, KILLED
    # by the job, and the error blamed the cap), and the reason stays the fleet's.
    timed_out = find_assignments(workers, [idle])
    assert (10, {}) == (len(timed_out.timed_out), timed_out.pending_reasons)
    # Its last placed task ended a second ago: the cap held it until then, so its wait for the fleet is 1 s.
    between = replace(running, placed=0, room_waited_seconds=1.0)
    result = find_assignments(workers, [between])
    assert () == result.timed_out and 2 == len(result.assignments)
    assert 10 == len(find_assignments(workers, [replace(between, room_waited_seconds=11.0)]).timed_out)


def test_many_passes_never_exceed_the_cap() -> None:
    """Pass after pass, with tasks ending in between, no more than the cap of a 60-task job is ever placed."""
    workers = [worker(f"w{i}", cpu=4) for i in range(4)]
    pending = list(range(60))
    running: list[int] = []
    most = 0
    for step in range(200):
        if not pending and not running:
            break
        base = job("arr", 1, max_concurrent=5, placed=len(running))
        got = find_assignments(workers, [replace(base, task_indices=tuple(pending))])
        new = sorted(a.task_index for a in got.assignments)
        pending = [i for i in pending if i not in new]
        running += new
        most = max(most, len(running))
        running = running[step % 3 :]  # some end, some go on
    assert (5, [], []) == (most, pending, running)


def test_the_autoscaler_asks_only_for_what_the_cap_lets_run() -> None:
    """A 100-task job capped at 2 on an empty fleet asks for slices for 2 tasks, not for 100."""
    group = GroupShape(name="cpu", hosts_per_slice=1, host_capacity=Resources(1000, 4 * GIB, 0, 0), max_slices=50)
    plan = plan_scaling([group], [], [job("arr", 100, max_concurrent=2)], [], now=0.0)
    assert {"cpu": 2} == plan.create
