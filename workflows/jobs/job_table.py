"""The job workflow's task table: one row per task, kept up to date by signals and results, and published.

The agent's `task_started`, a task's `task_retrying` and each task's result move its row; the
job's state is derived from the per-state counts (`job_state_from_counts`) and published as
the IrisJobState search attribute and the job's memo, at most once per workflow task.
"""

from __future__ import annotations

from collections.abc import Iterable

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from activities.contracts import TaskStarted, task_workflow_id
    from activities.proto import cluster_pb2 as pb
    from workflows.jobs.details import job_status_markdown
    from workflows.messages import TaskResult, TaskRetrying
    from workflows.states import TERMINAL_TASK_STATES, JobState, TaskState, job_state_from_counts
    from workflows.visibility import (
        JOB_STATE,
        MAX_ENDPOINT_TASKS,
        MAX_ERROR_CHARS,
        MAX_JOB_ERROR_CHARS,
        JobView,
        cap_text,
        memo_changes,
    )


class TaskTable:
    """The job's status and task rows, with the per-state counts kept in step (no scan per change).

    Plain state, no Temporal call: the workflow feeds it what its signals and children bring and
    publishes what it shows (`JobMemo`).
    """

    def __init__(self) -> None:
        self.status = pb.JobStatus()
        self.counts: dict[str, int] = {}  # tasks per state, kept by set_row
        self.endpoint_rows: set[int] = set()  # rows holding the endpoints of running tasks
        self.preempted = 0  # the rows' preemption counts summed (a plain job's; a gang's is status.preemptions)

    def add_rows(self, job_id: str, replicas: int) -> None:
        """One PENDING row per task of a new job."""
        for i in range(replicas):
            self.status.tasks.add(task_index=i, task_id=task_workflow_id(job_id, i), state=TaskState.PENDING)
        self.counts = {TaskState.PENDING: replicas}

    def take_over(self, status: pb.JobStatus) -> None:
        """The table an earlier run of this job handed over (job_handover)."""
        self.status.CopyFrom(status)
        self.counts = {}
        self.preempted = 0
        for row in self.status.tasks:
            self.counts[row.state] = self.counts.get(row.state, 0) + 1
            self.preempted += row.preemption_count
            if row.endpoints:
                self.endpoint_rows.add(row.task_index)

    def started(self, msg: TaskStarted) -> bool:
        """The agent started a task's process; False if the message is stale (an ended row, an old attempt)."""
        if not 0 <= msg.task_index < len(self.status.tasks):
            return False
        row = self.status.tasks[msg.task_index]
        if row.state in TERMINAL_TASK_STATES or msg.attempt < row.attempt:
            return False
        self.set_row(row, TaskState.RUNNING)
        row.attempt, row.worker_id = msg.attempt, msg.worker_id
        published = msg.endpoints if msg.task_index < MAX_ENDPOINT_TASKS else {}
        if published or row.endpoints:  # a restarted task publishes its new address
            row.endpoints.clear()
            row.endpoints.update(published)
            self.endpoint_rows.add(msg.task_index)
        return True

    def retrying(self, msg: TaskRetrying) -> bool:
        """A task goes back to the queue for another attempt; False for an ended or unknown row."""
        if not 0 <= msg.task_index < len(self.status.tasks):
            return False
        row = self.status.tasks[msg.task_index]
        if row.state in TERMINAL_TASK_STATES:
            return False
        self.set_row(row, TaskState.PENDING)
        row.attempt, row.error = msg.attempt, cap_text(msg.error, MAX_ERROR_CHARS)
        row.worker_id = ""  # waiting again: on no worker (the error says where it ran)
        self.preempted += msg.preemption_count - row.preemption_count
        row.failure_count, row.preemption_count = msg.failure_count, msg.preemption_count
        return True

    def record(self, index: int, result: TaskResult, *, gang: bool) -> None:
        """A task's end (a gang's budgets are counted by the job, not per row); the first failure is the job's error."""
        row = self.status.tasks[index]
        state = TaskState(result.state)
        self.set_row(row, state)
        row.worker_id, row.attempt = result.worker_id, result.attempt
        if not gang:
            self.preempted += result.preemption_count - row.preemption_count
            row.failure_count, row.preemption_count = result.failure_count, result.preemption_count
        error = result.error
        if state == TaskState.KILLED and error == "killed" and self.status.error:  # a sibling's failure killed it
            error = f"killed: {self.status.error}"
        row.error, row.result_blob = cap_text(error, MAX_ERROR_CHARS), result.result_blob
        row.has_exit_code = result.exit_code is not None
        row.exit_code = result.exit_code or 0
        row.peak_memory_bytes, row.cpu_seconds = result.peak_memory_bytes, result.cpu_seconds
        row.duration_seconds = result.run_seconds
        if state in (TaskState.FAILED, TaskState.WORKER_FAILED, TaskState.UNSCHEDULABLE) and not self.status.error:
            said = f"{state.lower()}: "  # "task 2 unschedulable: <why>", not "...: unschedulable: <why>"
            why = result.error.removeprefix(said)
            self.status.error = cap_text(f"task {index} {said}{why}", MAX_JOB_ERROR_CHARS)

    def reset(self, attempt: int) -> None:
        """Every row PENDING for a gang's next attempt."""
        for row in self.status.tasks:
            self.set_row(row, TaskState.PENDING)
            row.attempt, row.worker_id = attempt, ""
            row.has_exit_code, row.exit_code = False, 0
        self.status.error = ""

    def end_rows(self, indexes: Iterable[int], state: TaskState, error: str) -> None:
        """Rows that will never start (killed before their wave, or their dependencies refused them); the
        status's counts follow at once (a job refused before it starts ends without another sync)."""
        for i in indexes:
            row = self.status.tasks[i]
            self.set_row(row, state)
            row.error = error
        self.sync_counts()

    def failed_tasks(self) -> int:
        return self.counts.get(TaskState.FAILED, 0) + self.counts.get(TaskState.WORKER_FAILED, 0)

    def set_row(self, row: pb.TaskStatus, state: TaskState) -> None:
        """Move one task row to `state`, keeping the per-state counts in step."""
        if row.state == state:
            return
        left = self.counts.get(row.state, 0) - 1
        if left > 0:
            self.counts[row.state] = left
        else:
            self.counts.pop(row.state, None)
        self.counts[state] = self.counts.get(state, 0) + 1
        row.state = state
        if state != TaskState.RUNNING and row.endpoints:  # endpoints live as long as their task runs
            row.endpoints.clear()
            self.endpoint_rows.discard(row.task_index)

    def sync_counts(self) -> None:
        self.status.task_state_counts.clear()
        self.status.task_state_counts.update(self.counts)

    def state(self, max_task_failures: int, *, killed: bool = False) -> JobState:
        """The job's state as its rows say it (job_state_from_counts)."""
        return job_state_from_counts(
            self.counts, len(self.status.tasks), failed_tasks=self.failed_tasks(),
            max_task_failures=max_task_failures, killed=killed,
        )  # fmt: skip

    def view(self) -> JobView:
        st = self.status
        return JobView(
            state=st.state, counts=dict(st.task_state_counts), error=st.error,
            pending_reason=st.pending_reason if st.state == JobState.PENDING or st.task_state_counts.get(
                TaskState.PENDING) else "",
            num_tasks=st.num_tasks, submitted_at=st.submitted_at, finished_at=st.finished_at,
            endpoints=self._endpoints(), preemptions=st.preemptions or self.preempted,
            band=st.effective_priority if st.effective_priority != st.priority else "",
        )  # fmt: skip

    def _endpoints(self) -> dict[str, dict[str, str]]:
        """Each port name's "host:port" by task index, of the tasks running now (rows kept in `endpoint_rows`)."""
        out: dict[str, dict[str, str]] = {}
        for index in sorted(self.endpoint_rows):
            for name, address in self.status.tasks[index].endpoints.items():
                out.setdefault(name, {})[str(index)] = address
        return out


class JobMemo:
    """What the job shows outside its workflow: the memo (upserted at most once per workflow task, however
    many changes it saw), the IrisJobState search attribute, and the UI's details."""

    def __init__(self, table: TaskTable) -> None:
        self.table = table
        self.published = JobView()  # what the memo shows
        self.stale = False  # the memo lags the status

    def publish(self) -> None:
        """Mark the memo stale; `run` upserts it at the end of this workflow task."""
        self.stale = True

    async def run(self) -> None:
        self.stale = True
        while True:
            await workflow.wait_condition(lambda: self.stale)
            self.flush()

    def flush(self) -> None:
        self.stale = False
        view = self.table.view()
        if view != self.published:
            changes = memo_changes(self.published, view)
            self.published = view
            workflow.upsert_memo(changes)

    def set_state(self, state: JobState) -> None:
        status = self.table.status
        if status.state != state:
            status.state = state
            workflow.upsert_search_attributes([JOB_STATE.value_set(str(state))])
            workflow.set_current_details(job_status_markdown(status))  # UI metadata, not history


def read_task_result(raw: RawValue) -> TaskResult:
    """A task's result (a child's, or a TASK_ENDED signal's).

    Taken raw and converted here, by the payload converter's per-type plan (activities.contracts.dataclass_json): a
    job's workflow task that takes hundreds of ended tasks at once stays far from the deadlock detector.
    """
    return workflow.payload_converter().from_payload(raw.payload, TaskResult)  # type: ignore[no-any-return]


def read_task_started(raw: RawValue) -> TaskStarted:
    """A TASK_STARTED signal's argument (one per attempt), converted as `read_task_result` does."""
    return workflow.payload_converter().from_payload(raw.payload, TaskStarted)  # type: ignore[no-any-return]
