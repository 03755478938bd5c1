"""Throttled arrays: at most `max_concurrent` tasks of a job placed at once (Slurm's `--array=1-500%8`).

A pass sees how many of the job's tasks are placed already (`PendingJob.placed`) and offers the
rest of the pass only the room left under the cap; the tasks beyond it wait with a reason that
says so. Pure: the cap is a property of the snapshot, not of any clock or counter the pass keeps.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.types import PendingJob


def room(job: PendingJob) -> int | None:
    """How many more of `job`'s tasks may be placed now; None when the job has no cap."""
    if job.max_concurrent <= 0:
        return None
    return max(0, job.max_concurrent - job.placed)


def capped(job: PendingJob) -> PendingJob:
    """`job` with only as many pending tasks as its cap leaves room for (itself when uncapped or within it)."""
    left = room(job)
    if left is None or left >= len(job.task_indices):
        return job
    return replace(job, task_indices=job.task_indices[:left])


def reason(job: PendingJob, waiting: int) -> str:
    """Why `waiting` of the job's tasks wait although the fleet may have room: its cap."""
    return (
        f"max_concurrent={job.max_concurrent}: {job.max_concurrent} of its tasks placed at a time; "
        f"{waiting} wait for one to end"
    )
