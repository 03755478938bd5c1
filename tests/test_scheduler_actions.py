"""The scheduler's record of its own actions stays bounded and reads well on the dashboard."""

from __future__ import annotations

from iris.dashboard.actions import ActionFilter, scheduler_action
from workflows.scheduler.scheduler_actions import ACTIONS_KEPT, new_ring, placed_detail, record


def test_the_ring_keeps_the_newest_actions_only() -> None:
    """Past ACTIONS_KEPT the oldest action falls out; long details are cut."""
    ring = new_ring()
    for i in range(ACTIONS_KEPT + 10):
        record(ring, float(i), "tasks placed", "job", f"job-{i}", "x" * 500)
    assert ACTIONS_KEPT == len(ring)
    assert "job-10" == ring[0][3]
    assert 200 == len(str(ring[-1][4]))


def test_placements_are_summarised_per_job() -> None:
    """One pass's placements of a job read as one line naming the tasks and (some of) the workers."""
    assert "task 3 on w1" == placed_detail([3], ["w1"])
    assert "tasks 0-3 on w1, w2" == placed_detail([2, 0, 1, 3], ["w2", "w1", "w1", "w2"])
    workers = [f"w{i}" for i in range(6)]
    assert "3 tasks on w0, w1, w2, w3 and 2 more" == placed_detail([0, 5, 9], workers)


def test_filters_keep_the_scheduler_actions_of_their_job_or_worker() -> None:
    """A job filter keeps the job's and its children's rows; a worker filter the worker's and placements on it."""
    placed = scheduler_action([5.0, "tasks placed", "job", "train/eval", "task 0 on w1, w2", True])
    cordon = scheduler_action([6.0, "worker cordoned", "worker", "w2", "drain", True])
    assert (True, False) == (ActionFilter(job="train").keeps(placed), ActionFilter(job="train").keeps(cordon))
    assert (True, True) == (ActionFilter(worker="w2").keeps(placed), ActionFilter(worker="w2").keeps(cordon))
    assert not ActionFilter(worker="w").keeps(placed)
    assert not ActionFilter(user="ana").keeps(placed)  # the scheduler's record names no user
    assert "train/eval" == placed.workflow_id
