"""Job and task lifecycles as explicit transition tables.

`TASK_TRANSITIONS[(state, event)]` is the whole task state machine; anything not
in the table is a bug and raises. Job state is derived from task states, never
stored independently (see `derive_job_state`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
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


class TaskEvent(StrEnum):
    ASSIGNED = "assigned"            # the scheduler committed capacity on a worker
    STARTED = "started"              # the worker agent started the process
    DISPATCH_FAILED = "dispatch_failed"  # the worker never picked the task up
    SUCCEEDED = "succeeded"
    FAILED = "failed"                # the task's own fault (non-zero exit, exception)
    WORKER_LOST = "worker_lost"      # heartbeats stopped: worker died or was preempted
    RETRY = "retry"                  # budget left: back to the queue
    KILLED = "killed"
    TIMED_OUT = "timed_out"          # scheduling timeout passed while pending


TERMINAL_TASK_STATES = frozenset(
    {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.UNSCHEDULABLE, TaskState.WORKER_FAILED}
)
TERMINAL_JOB_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED, JobState.UNSCHEDULABLE}
)

_S, _E = TaskState, TaskEvent
TASK_TRANSITIONS: dict[tuple[TaskState, TaskEvent], TaskState] = {
    (_S.PENDING, _E.ASSIGNED): _S.ASSIGNED,
    (_S.PENDING, _E.KILLED): _S.KILLED,
    (_S.PENDING, _E.TIMED_OUT): _S.UNSCHEDULABLE,
    (_S.ASSIGNED, _E.STARTED): _S.RUNNING,
    (_S.ASSIGNED, _E.DISPATCH_FAILED): _S.PENDING,
    (_S.ASSIGNED, _E.SUCCEEDED): _S.SUCCEEDED,
    (_S.ASSIGNED, _E.FAILED): _S.FAILED,
    (_S.ASSIGNED, _E.WORKER_LOST): _S.WORKER_FAILED,
    (_S.ASSIGNED, _E.KILLED): _S.KILLED,
    (_S.RUNNING, _E.SUCCEEDED): _S.SUCCEEDED,
    (_S.RUNNING, _E.FAILED): _S.FAILED,
    (_S.RUNNING, _E.WORKER_LOST): _S.WORKER_FAILED,
    (_S.RUNNING, _E.KILLED): _S.KILLED,
    (_S.FAILED, _E.RETRY): _S.PENDING,
    (_S.WORKER_FAILED, _E.RETRY): _S.PENDING,
}


def next_task_state(state: TaskState, event: TaskEvent) -> TaskState:
    """Look the move up in the table; an unknown move is a programming error."""
    try:
        return TASK_TRANSITIONS[(state, event)]
    except KeyError:
        raise ValueError(f"illegal task transition: {event} in state {state}") from None


def derive_job_state(
    task_states: Iterable[TaskState], *, failed_tasks: int, max_task_failures: int, killed: bool
) -> JobState:
    """Job state from its tasks (see `job_state_from_counts`, which a job keeps up to date instead)."""
    counts = Counter(map(str, task_states))
    return job_state_from_counts(
        counts, sum(counts.values()), failed_tasks=failed_tasks, max_task_failures=max_task_failures, killed=killed
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
