"""The job's state kept from per-state counts agrees with deriving it from every task row."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from workflows.states import TERMINAL_TASK_STATES, JobState, TaskState, job_state_from_counts


def scan(states: list[TaskState], failed: int, max_failures: int, killed: bool) -> JobState:
    """The rule written over the whole task list, as the job stated it before it kept counts."""
    if killed:
        return JobState.KILLED
    if failed > max_failures:
        return JobState.FAILED
    if TaskState.UNSCHEDULABLE in states:
        return JobState.UNSCHEDULABLE
    if states and all(s in TERMINAL_TASK_STATES for s in states):
        ok = states.count(TaskState.SUCCEEDED)
        return JobState.SUCCEEDED if ok + failed == len(states) else JobState.FAILED
    if any(s in (TaskState.RUNNING, TaskState.SUCCEEDED) for s in states):
        return JobState.RUNNING
    return JobState.PENDING


@given(
    st.lists(st.sampled_from(list(TaskState)), min_size=1, max_size=40),
    st.integers(min_value=0, max_value=5),
    st.booleans(),
)
def test_counts_decide_the_job_state_as_the_task_rows_do(
    states: list[TaskState], max_failures: int, killed: bool
) -> None:
    """Whatever mix of task states a job has, counting them gives the state a scan of the rows gives."""
    failed = sum(1 for s in states if s in (TaskState.FAILED, TaskState.WORKER_FAILED))
    counts = Counter(str(s) for s in states)
    expected = scan(states, failed, max_failures, killed)
    actual = job_state_from_counts(
        counts, len(states), failed_tasks=failed, max_task_failures=max_failures, killed=killed
    )
    assert expected == actual


def test_a_job_with_one_task_left_running_is_running_and_succeeds_when_it_ends() -> None:
    """9,999 of 10,000 tasks done: RUNNING; the last one done: SUCCEEDED."""
    counts = {TaskState.SUCCEEDED: 9_999, TaskState.RUNNING: 1}
    assert JobState.RUNNING == job_state_from_counts(
        counts, 10_000, failed_tasks=0, max_task_failures=0, killed=False
    )
    counts = {TaskState.SUCCEEDED: 10_000}
    assert JobState.SUCCEEDED == job_state_from_counts(
        counts, 10_000, failed_tasks=0, max_task_failures=0, killed=False
    )
