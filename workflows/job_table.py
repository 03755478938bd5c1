"""The job workflow's task table: one row per task, kept up to date by signals and results, and published.

The agent's `task_started`, a task's `task_retrying` and each task's result move its row; the
job's state is derived from the per-state counts (`job_state_from_counts`) and published as
the IrisJobState search attribute and the job's memo, at most once per workflow task.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        JOB_STATUS_QUERY,
        JOB_TASKS_QUERY,
        PENDING_REASON,
        TASK_ENDED,
        TASK_RETRYING,
        TASK_STARTED,
        TaskStarted,
    )
    from activities.proto import cluster_pb2 as pb
    from workflows.details import job_status_markdown
    from workflows.job_base import JobBase
    from workflows.job_lifecycle import JobEvent, JobPhase
    from workflows.job_summary import summary_status, task_page
    from workflows.messages import TaskResult, TaskRetrying
    from workflows.states import TERMINAL_TASK_STATES, JobState, TaskState, job_state_from_counts
    from workflows.visibility import (
        JOB_STATE,
        MAX_ENDPOINT_TASKS,
        MAX_ERROR_CHARS,
        MAX_JOB_ERROR_CHARS,
        MAX_REASON_CHARS,
        JobView,
        cap_text,
        memo_changes,
    )



class Table(JobBase):
    """Mixed into JobWorkflow (see its module)."""

    @workflow.query(name=JOB_STATUS_QUERY)
    def job_status(self) -> pb.JobStatus:
        """The job, with its rows past MAX_TABLE_ROWS tasks left to `job_tasks` (a summary: job_summary)."""
        return summary_status(self.status)

    @workflow.query(name=JOB_TASKS_QUERY)
    def job_tasks(self, start: int, stop: int) -> bytes:
        """Task rows `start` to `stop` (at most MAX_PAGE_ROWS), compressed: how a client reads a big job's table."""
        return task_page(self.status, start, stop)

    @workflow.signal(name=TASK_STARTED)
    def task_started(self, raw: RawValue) -> None:
        """The agent started a task's process (one signal per attempt: taken raw and decoded, as results are)."""
        msg = read_task_started(raw)
        if not 0 <= msg.task_index < len(self.status.tasks):
            return
        row = self.status.tasks[msg.task_index]
        if row.state in TERMINAL_TASK_STATES or msg.attempt < row.attempt:
            return
        self._set_row(row, TaskState.RUNNING)
        row.attempt, row.worker_id = msg.attempt, msg.worker_id
        published = msg.endpoints if msg.task_index < MAX_ENDPOINT_TASKS else {}
        if published or row.endpoints:  # a restarted task publishes its new address
            row.endpoints.clear()
            row.endpoints.update(published)
            self._endpoint_rows.add(msg.task_index)
        self._refresh_state()

    @workflow.signal(name=PENDING_REASON)
    def pending_reason(self, reason: str) -> None:
        """Why the scheduler cannot place this job's pending tasks yet ("" once it can); sent on change."""
        self.status.pending_reason = cap_text(reason, MAX_REASON_CHARS)
        self._publish()

    @workflow.signal(name=TASK_ENDED)
    def task_ended(self, raw: RawValue) -> None:
        """A task of a job that continues as new ended; it reaches this run even if an earlier one started it."""
        result = read_task_result(raw)
        if 0 <= result.task_index < len(self.status.tasks):
            self._ended.append((result.task_index, result))

    @workflow.signal(name=TASK_RETRYING)
    def task_retrying(self, msg: TaskRetrying) -> None:
        if not 0 <= msg.task_index < len(self.status.tasks):
            return
        row = self.status.tasks[msg.task_index]
        if row.state in TERMINAL_TASK_STATES:
            return
        self._set_row(row, TaskState.PENDING)
        row.attempt, row.error = msg.attempt, cap_text(msg.error, MAX_ERROR_CHARS)
        row.failure_count, row.preemption_count = msg.failure_count, msg.preemption_count
        self._refresh_state()

    def _record(self, index: int, result: TaskResult) -> None:
        row = self.status.tasks[index]
        self._set_row(row, TaskState(result.state))
        row.worker_id, row.attempt = result.worker_id, result.attempt
        if not self.req.coschedule_group_by:  # a gang's budgets are counted by the job (_run_gang)
            row.failure_count, row.preemption_count = result.failure_count, result.preemption_count
        row.error, row.result_blob = cap_text(result.error, MAX_ERROR_CHARS), result.result_blob
        row.has_exit_code = result.exit_code is not None
        row.exit_code = result.exit_code or 0
        row.peak_memory_bytes, row.cpu_seconds = result.peak_memory_bytes, result.cpu_seconds
        row.duration_seconds = result.run_seconds
        state = TaskState(result.state)
        if state in (TaskState.FAILED, TaskState.WORKER_FAILED, TaskState.UNSCHEDULABLE) and not self.status.error:
            self.status.error = cap_text(f"task {index} {state.lower()}: {result.error}", MAX_JOB_ERROR_CHARS)
        gang_broken = bool(self.req.coschedule_group_by) and (
            state in (TaskState.FAILED, TaskState.WORKER_FAILED) or result.dispatch_failed
        )
        if gang_broken:
            self._on(JobEvent.GANG_BROKE, cause=result)
        elif state == TaskState.UNSCHEDULABLE or self._failed_tasks() > self.req.max_task_failures:
            self._on(JobEvent.FAIL)
        self._refresh_state()

    def _failed_tasks(self) -> int:
        return self._counts.get(TaskState.FAILED, 0) + self._counts.get(TaskState.WORKER_FAILED, 0)

    def _set_row(self, row: pb.TaskStatus, state: TaskState) -> None:
        """Move one task row to `state`, keeping the per-state counts in step."""
        if row.state == state:
            return
        left = self._counts.get(row.state, 0) - 1
        if left > 0:
            self._counts[row.state] = left
        else:
            self._counts.pop(row.state, None)
        self._counts[state] = self._counts.get(state, 0) + 1
        row.state = state
        if state != TaskState.RUNNING and row.endpoints:  # endpoints live as long as their task runs
            row.endpoints.clear()
            self._endpoint_rows.discard(row.task_index)

    def _refresh_state(self) -> None:
        self.status.task_state_counts.clear()
        self.status.task_state_counts.update(self._counts)
        self._publish()
        if self._phase is not JobPhase.ACTIVE:
            return  # the final state is decided once every task has stopped
        state = job_state_from_counts(
            self._counts,
            len(self.status.tasks),
            failed_tasks=self._failed_tasks(),
            max_task_failures=self.req.max_task_failures,
            killed=False,
        )
        self._set_state(state)

    def _view(self) -> JobView:
        st = self.status
        return JobView(
            state=st.state, counts=dict(st.task_state_counts), error=st.error,
            pending_reason=st.pending_reason if st.state == JobState.PENDING or st.task_state_counts.get(
                TaskState.PENDING) else "",
            num_tasks=st.num_tasks, submitted_at=st.submitted_at, finished_at=st.finished_at,
            endpoints=self._endpoints(),
        )  # fmt: skip

    def _endpoints(self) -> dict[str, dict[str, str]]:
        """Each port name's "host:port" by task index, of the tasks running now (rows kept in `_endpoint_rows`)."""
        out: dict[str, dict[str, str]] = {}
        for index in sorted(self._endpoint_rows):
            for name, address in self.status.tasks[index].endpoints.items():
                out.setdefault(name, {})[str(index)] = address
        return out

    def _publish(self) -> None:
        """Mark the memo stale; `_publisher` upserts it once per workflow task, however many changes it saw."""
        self._stale = True

    async def _publisher(self) -> None:
        self._stale = True
        while True:
            await workflow.wait_condition(lambda: self._stale)
            self._flush()

    def _flush(self) -> None:
        self._stale = False
        view = self._view()
        if view != self._published:
            changes = memo_changes(self._published, view)
            self._published = view
            workflow.upsert_memo(changes)

    def _set_state(self, state: JobState) -> None:
        if self.status.state != state:
            self.status.state = state
            workflow.upsert_search_attributes([JOB_STATE.value_set(str(state))])
            workflow.set_current_details(job_status_markdown(self.status))  # UI metadata, not history


def read_task_result(raw: RawValue) -> TaskResult:
    """A task's result (a child's, or a TASK_ENDED signal's).

    Taken raw and converted here, by the payload converter's per-type plan (activities.contracts.dataclass_json): a
    job's workflow task that takes hundreds of ended tasks at once stays far from the deadlock detector.
    """
    return workflow.payload_converter().from_payload(raw.payload, TaskResult)  # type: ignore[no-any-return]


def read_task_started(raw: RawValue) -> TaskStarted:
    """A TASK_STARTED signal's argument (one per attempt), converted as `read_task_result` does."""
    return workflow.payload_converter().from_payload(raw.payload, TaskStarted)  # type: ignore[no-any-return]
