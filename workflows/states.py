"""Task and job states, as users see them.

A task moves by the table in `task_lifecycle`; a job's state is derived from how many
of its tasks are in each state (`job_state_from_counts`), never stored on its own, and
what a job does meanwhile is the table in `job_lifecycle`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class TaskState(StrEnum):
    PENDING = "PENDING"
    ASSIGNED = "ASSIGNED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    WORKER_FAILED = "WORKER_FAILED"
    UNSCHEDULABLE = "UNSCHEDULABLE"


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    UNSCHEDULABLE = "UNSCHEDULABLE"


TERMINAL_TASK_STATES = frozenset(
    {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.UNSCHEDULABLE, TaskState.WORKER_FAILED}
)
TERMINAL_JOB_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED, JobState.UNSCHEDULABLE}
)


def job_state_from_counts(
    counts: Mapping[str, int], num_tasks: int, *, failed_tasks: int, max_task_failures: int, killed: bool
) -> JobState:
    """Job state from how many of its `num_tasks` tasks are in each state.

    FAILED once more tasks failed for good than `max_task_failures` allows;
    UNSCHEDULABLE if any task timed out waiting; KILLED if the user terminated
    it; SUCCEEDED when every task succeeded; RUNNING once any task runs.
    Counts rather than rows, so a 10,000-task job decides in constant time per change.
    """
    if killed:
        return JobState.KILLED
    if failed_tasks > max_task_failures:
        return JobState.FAILED
    if counts.get(TaskState.UNSCHEDULABLE, 0):
        return JobState.UNSCHEDULABLE
    ended = sum(counts.get(s, 0) for s in TERMINAL_TASK_STATES)
    if num_tasks and ended == num_tasks:
        succeeded = counts.get(TaskState.SUCCEEDED, 0)
        return JobState.SUCCEEDED if succeeded + failed_tasks == num_tasks else JobState.FAILED
    if counts.get(TaskState.RUNNING, 0) or counts.get(TaskState.SUCCEEDED, 0):
        return JobState.RUNNING
    return JobState.PENDING
