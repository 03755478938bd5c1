"""The queue is tried in submission order, whatever order the jobs' enqueues reached the scheduler."""

from __future__ import annotations

from activities.proto import cluster_pb2 as pb
from activities.scheduling import jobs_from_pb


def test_jobs_are_queued_by_submission_time_not_by_arrival() -> None:
    """Two jobs submitted a moment apart may enqueue the other way round (their workflows run side by
    side); the scheduler still tries, and the dashboard still lists, the earlier one first."""
    snap = pb.SchedulingSnapshot(now=100.0)
    for job_id, submitted in (("second", 50.2), ("first", 50.1), ("third", 60.0)):
        snap.jobs.add(job_id=job_id, task_indices=[0], submitted_at=submitted)
    jobs = jobs_from_pb(snap)
    assert ["first", "second", "third"] == [j.job_id for j in jobs]
    assert [49.9, 49.8, 40.0] == [round(j.waited_seconds, 1) for j in jobs]


def test_a_snapshot_without_submission_times_keeps_its_order() -> None:
    snap = pb.SchedulingSnapshot(now=100.0)
    for job_id in ("b", "a", "c"):
        snap.jobs.add(job_id=job_id, task_indices=[0], waited_seconds=1.0)
    assert ["b", "a", "c"] == [j.job_id for j in jobs_from_pb(snap)]
