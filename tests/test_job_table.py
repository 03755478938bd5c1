"""The job's task table as a plain object: what a user reads of a job (its state, counts, error, endpoints)
follows what its tasks report, whatever the order, without a workflow around it."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from activities.contracts import TaskStarted
from workflows.jobs.job_table import TaskTable
from workflows.messages import TaskResult, TaskRetrying
from workflows.states import JobState, TaskState


def table(replicas: int = 3) -> TaskTable:
    t = TaskTable()
    t.status.job_id, t.status.num_tasks = "job-1", replicas
    t.add_rows("job-1", replicas)
    return t


def test_a_started_task_runs_and_publishes_its_endpoints_until_it_ends() -> None:
    t = table()
    assert t.started(TaskStarted(0, attempt=0, worker_id="w1", endpoints={"http": "10.0.0.1:8000"}))
    assert t.started(TaskStarted(2, attempt=0, worker_id="w2", endpoints={"http": "10.0.0.2:8000"}))
    assert {"http": {"0": "10.0.0.1:8000", "2": "10.0.0.2:8000"}} == t.view().endpoints
    assert JobState.RUNNING == t.state(max_task_failures=0)

    t.record(0, TaskResult(0, TaskState.SUCCEEDED, worker_id="w1", exit_code=0), gang=False)
    assert {"http": {"2": "10.0.0.2:8000"}} == t.view().endpoints  # an ended task's address is gone
    assert "w1" == t.status.tasks[0].worker_id and t.status.tasks[0].has_exit_code


def test_a_stale_start_changes_nothing() -> None:
    """A start of an earlier attempt (a late signal), of an ended task or of a task that does not exist."""
    t = table()
    t.retrying(TaskRetrying(1, attempt=2, failure_count=1, preemption_count=1, last_state=TaskState.FAILED, error="x"))
    t.record(0, TaskResult(0, TaskState.KILLED), gang=False)
    before = t.status.SerializeToString()
    assert not t.started(TaskStarted(1, attempt=1, worker_id="w1"))
    assert not t.started(TaskStarted(0, attempt=0, worker_id="w1"))
    assert not t.started(TaskStarted(7, attempt=0, worker_id="w1"))
    assert before == t.status.SerializeToString()


def test_the_first_failure_is_the_jobs_error_and_a_gang_attempt_starts_clean() -> None:
    t = table()
    t.record(1, TaskResult(1, TaskState.FAILED, error="exit 3", failure_count=1), gang=False)
    t.record(2, TaskResult(2, TaskState.WORKER_FAILED, error="host lost"), gang=False)
    assert "task 1 failed: exit 3" == t.status.error
    assert 2 == t.failed_tasks()
    assert JobState.FAILED == t.state(max_task_failures=1)  # 2 > 1
    assert JobState.PENDING == t.state(max_task_failures=2)  # within its budget, task 0 still to run

    t.reset(attempt=1)
    assert ("", {TaskState.PENDING: 3}) == (t.status.error, t.counts)
    assert [1, 1, 1] == [row.attempt for row in t.status.tasks]


def test_an_unschedulable_tasks_reason_is_the_jobs_error_said_once() -> None:
    """The task's row says "unschedulable: <why>"; the job's error names the task and says it once."""
    t = table()
    t.record(2, TaskResult(2, TaskState.UNSCHEDULABLE, error="unschedulable: 0/3 workers: 3 have < 64 free cpu"),
             gang=False)  # fmt: skip
    assert "task 2 unschedulable: 0/3 workers: 3 have < 64 free cpu" == t.status.error
    assert t.status.tasks[2].error.startswith("unschedulable: ")


def test_the_listed_view_counts_preemptions_and_a_requeued_task_is_on_no_worker() -> None:
    """What `list_jobs` reads (the memo) counts a plain job's preemptions as `status()` does, keeps a
    demoted band, and leaves both keys out while they are at their defaults (a job never preempted nor
    demoted upserts what it always did)."""
    t = table()
    t.status.priority = t.status.effective_priority = "interactive"
    assert {"preemptions", "band"}.isdisjoint(t.view().to_memo())
    assert t.started(TaskStarted(1, attempt=0, worker_id="w1"))
    t.retrying(TaskRetrying(1, attempt=1, failure_count=0, preemption_count=1, last_state=TaskState.WORKER_FAILED,
                            error="preempted by production job p"))  # fmt: skip
    assert "" == t.status.tasks[1].worker_id  # waiting again, on no worker
    assert t.started(TaskStarted(1, attempt=1, worker_id="w2"))
    t.record(1, TaskResult(1, TaskState.SUCCEEDED, worker_id="w2", attempt=2, preemption_count=2), gang=False)
    t.status.effective_priority = "batch"
    view = t.view()
    assert (2, "batch") == (view.preemptions, view.band)
    assert {"preemptions": 2, "band": "batch"}.items() <= view.to_memo().items()
    assert (2, "batch") == (type(view).from_memo(view.to_memo()).preemptions, type(view).from_memo(view.to_memo()).band)


def test_rows_that_never_start_say_why() -> None:
    t = table(4)
    t.end_rows(range(2, 4), TaskState.KILLED, "killed before it started")
    assert {TaskState.PENDING: 2, TaskState.KILLED: 2} == t.counts
    assert ["", "", "killed before it started", "killed before it started"] == [r.error for r in t.status.tasks]


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["start", "retry", "end"]),
        st.integers(0, 4),
        st.integers(0, 3),
        st.sampled_from([TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.WORKER_FAILED]),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(EVENTS)
def test_the_counts_always_match_the_rows(events: list[tuple[str, int, int, TaskState]]) -> None:
    """Whatever reaches the table in whatever order, the per-state counts (the job's state, the memo) are the
    rows' own, and only running rows hold endpoints."""
    t = table(4)
    for kind, index, attempt, end in events:
        if kind == "start":
            t.started(TaskStarted(index, attempt, f"w{index}", {"p": f"h{index}:1"}))
        elif kind == "retry":
            t.retrying(TaskRetrying(index, attempt, 0, 0, TaskState.FAILED))
        elif index < 4:
            t.record(index, TaskResult(index, end, attempt=attempt), gang=False)
    assert Counter(row.state for row in t.status.tasks) == Counter(t.counts)
    running = {str(r.task_index) for r in t.status.tasks if r.state == TaskState.RUNNING}
    assert set(t.view().endpoints.get("p", {})) <= running
