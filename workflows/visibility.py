"""What a job publishes to Temporal's visibility, and the caps that keep its payloads small.

The job workflow upserts a memo (state, counts, error, pending reason) and its
state search attribute whenever they change, so the client lists and watches
jobs from visibility alone (one list call, one describe) instead of querying
workflows. Pure functions: the workflow and the client share them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from temporalio.common import SearchAttributeKey

from activities.contracts import (
    JOB_NAME_ATTRIBUTE,
    JOB_NAMESPACE_ATTRIBUTE,
    JOB_PARENT_ATTRIBUTE,
    JOB_PRIORITY_ATTRIBUTE,
    JOB_STATE_ATTRIBUTE,
    JOB_TASKS_ATTRIBUTE,
    JOB_USER_ATTRIBUTE,
    KIND_ATTRIBUTE,
    result_blob_key,
    task_workflow_id,
)
from activities.proto import cluster_pb2 as pb
from workflows.states import JobState, TaskState

JOB_STATE = SearchAttributeKey.for_keyword(JOB_STATE_ATTRIBUTE)
JOB_NAME = SearchAttributeKey.for_keyword(JOB_NAME_ATTRIBUTE)
JOB_USER = SearchAttributeKey.for_keyword(JOB_USER_ATTRIBUTE)
JOB_PRIORITY = SearchAttributeKey.for_keyword(JOB_PRIORITY_ATTRIBUTE)
JOB_TASKS = SearchAttributeKey.for_int(JOB_TASKS_ATTRIBUTE)
JOB_NAMESPACE = SearchAttributeKey.for_keyword(JOB_NAMESPACE_ATTRIBUTE)
JOB_PARENT = SearchAttributeKey.for_keyword(JOB_PARENT_ATTRIBUTE)
KIND = SearchAttributeKey.for_keyword(KIND_ATTRIBUTE)

MAX_ERROR_CHARS = 300
"""A task's error as kept in the job's table: 2,000 tasks x 300 chars stays far below the 2 MB payload limit."""
MAX_JOB_ERROR_CHARS = 2_000
MAX_REASON_CHARS = 500
MAX_TABLE_ROWS = 2_000
"""Tasks beyond which a job's query answer and result are a summary (workflows/jobs/job_summary.py) and its
handed-over table is compact (compact_status)."""
MAX_LISTED_ERRORS = 200
"""Task errors a compact table keeps (the first ones by task index); the job's own error stays whole."""

MEMO_STATE = "state"
MEMO_COUNTS = "counts"
MEMO_ERROR = "error"
MEMO_REASON = "pending_reason"
MEMO_TASKS = "num_tasks"
MEMO_SUBMITTED = "submitted_at"
MEMO_FINISHED = "finished_at"
MEMO_PREEMPTIONS = "preemptions"  # only once there was one
MEMO_BAND = "band"  # the band the scheduler uses, only while it differs from the one asked (a user out of credits)
MEMO_ENDPOINTS = "endpoints/"
"""Prefix of one memo key per running task with named ports (`endpoints/3` -> {"http": "host:port"}), so a
task's start or end upserts its own small key, never the whole job's list again."""
MAX_ENDPOINT_TASKS = 1_000
"""Tasks (by index) whose endpoints a job publishes: a job's memo comes with every `list_jobs` row."""


def cap_text(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how much was cut (so a reader knows it is partial)."""
    if len(text) <= limit:
        return text
    note = f" ... [{len(text) - limit} more characters cut]"
    return text[: max(0, limit - len(note))] + note


@dataclass(frozen=True)
class JobView:
    """A job as visibility holds it: what `list_jobs` and `wait` read without touching the workflow."""

    state: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    error: str = ""
    pending_reason: str = ""
    num_tasks: int = 0
    submitted_at: float = 0.0
    finished_at: float = 0.0
    # Port name -> task index (as a string: memo keys are JSON) -> "host:port", of running tasks only.
    endpoints: dict[str, dict[str, str]] = field(default_factory=dict)
    preemptions: int = 0  # as `JobStatus.preemptions` counts them
    band: str = ""  # the effective band when it is not the asked one ("" otherwise)

    def to_memo(self) -> dict[str, Any]:
        """The memo keys; the two that are rare are left out while they hold their default, so a job that is
        never preempted nor demoted upserts exactly what it did before they existed."""
        return {
            MEMO_STATE: self.state,
            MEMO_COUNTS: dict(self.counts),
            MEMO_ERROR: cap_text(self.error, MAX_JOB_ERROR_CHARS),
            MEMO_REASON: cap_text(self.pending_reason, MAX_REASON_CHARS),
            MEMO_TASKS: self.num_tasks,
            MEMO_SUBMITTED: self.submitted_at,
            MEMO_FINISHED: self.finished_at,
            **({MEMO_PREEMPTIONS: self.preemptions} if self.preemptions else {}),
            **({MEMO_BAND: self.band} if self.band else {}),
            **self._endpoint_keys(),
        }

    def _endpoint_keys(self) -> dict[str, dict[str, str]]:
        keys: dict[str, dict[str, str]] = {}
        for name, by_task in self.endpoints.items():
            for index, address in by_task.items():
                keys.setdefault(MEMO_ENDPOINTS + index, {})[name] = address
        return keys

    @classmethod
    def from_memo(cls, memo: Mapping[str, Any]) -> JobView:
        """Tolerant of missing keys: a job started before the memo existed has none."""
        counts = memo.get(MEMO_COUNTS) or {}
        endpoints: dict[str, dict[str, str]] = {}
        for key, by_name in memo.items():
            if key.startswith(MEMO_ENDPOINTS) and isinstance(by_name, Mapping):
                for name, address in by_name.items():
                    endpoints.setdefault(str(name), {})[key.removeprefix(MEMO_ENDPOINTS)] = str(address)
        return cls(
            state=str(memo.get(MEMO_STATE) or ""),
            counts={str(k): int(v) for k, v in counts.items()} if isinstance(counts, Mapping) else {},
            error=str(memo.get(MEMO_ERROR) or ""),
            pending_reason=str(memo.get(MEMO_REASON) or ""),
            num_tasks=int(memo.get(MEMO_TASKS) or 0),
            submitted_at=float(memo.get(MEMO_SUBMITTED) or 0.0),
            finished_at=float(memo.get(MEMO_FINISHED) or 0.0),
            endpoints=endpoints,
            preemptions=int(memo.get(MEMO_PREEMPTIONS) or 0),
            band=str(memo.get(MEMO_BAND) or ""),
        )


def memo_changes(before: JobView, after: JobView) -> dict[str, Any]:
    """The memo keys that differ (None for a key to remove, as `upsert_memo` takes it)."""
    old, new = before.to_memo(), after.to_memo()
    changes: dict[str, Any] = {k: v for k, v in new.items() if old.get(k) != v}
    changes.update({k: None for k in old if k not in new})
    return changes


def initial_job_view(req: pb.JobRequest) -> JobView:
    """The memo a job starts with: the client sets it at start, so the job's first workflow task
    has nothing to upsert (the workflow reads it back from its start event)."""
    return JobView(
        state=JobState.PENDING.value, counts={TaskState.PENDING.value: req.replicas}, num_tasks=req.replicas,
        submitted_at=req.submitted_at,
    )


def compact_status(status: pb.JobStatus) -> pb.JobStatus:
    """The job's status as it is handed over to its next run: whole up to MAX_TABLE_ROWS tasks.

    Past that, rows leave out what the client derives (task ids, result keys) and errors
    past the first MAX_LISTED_ERRORS, so 10,000 rows stay near 1 MB (the payload limit is
    2 MB; whole rows with 300-character errors were ~4.5 MB at 10,000 tasks).
    """
    if len(status.tasks) <= MAX_TABLE_ROWS:
        return status
    out = pb.JobStatus()
    out.CopyFrom(status)
    out.compact = True
    compact_rows(out.job_id, out.tasks, MAX_LISTED_ERRORS)
    return out


def compact_rows(job_id: str, rows: Iterable[pb.TaskStatus], max_errors: int) -> None:
    """Leave out of `rows` what the client derives (`expand_row`), and errors past the first `max_errors`."""
    errors = 0
    for row in rows:
        row.task_id = ""
        if row.result_blob == result_blob_key(job_id, row.task_index, row.attempt):
            row.result_blob = ""
        if row.error:
            errors += 1
            if errors > max_errors:
                row.error = ""


def expand_row(job_id: str, compact: bool, row: pb.TaskStatus) -> tuple[str, str]:
    """A row's task id and the result key to read (maybe absent: a command has none), compact or not."""
    if not compact:
        return row.task_id, row.result_blob
    key = row.result_blob or result_blob_key(job_id, row.task_index, row.attempt)
    return task_workflow_id(job_id, row.task_index), key
