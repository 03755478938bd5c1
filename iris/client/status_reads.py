"""How the client turns what Temporal holds into `JobStatus`/`TaskStatus`, and back into visibility rows.

Pure conversions, no I/O: a job's status proto (from a query or its result), its visibility
row (memo and search attributes), the list filter, and the search attributes a new job starts with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from temporalio.client import WorkflowFailureError
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from activities.contracts import JOB_ID_SEPARATOR, JOB_KIND
from activities.proto import cluster_pb2 as pb
from activities.proto.values import get_attr
from iris.types import JobState, JobStatus, TaskState, TaskStatus, WorkerStatus
from workflows.visibility import (
    JOB_NAME,
    JOB_NAMESPACE,
    JOB_PARENT,
    JOB_PRIORITY,
    JOB_STATE,
    JOB_TASKS,
    JOB_USER,
    KIND,
    JobView,
    expand_row,
)


def _job_status(st: pb.JobStatus, pending_reason: str = "") -> JobStatus:
    tasks = tuple(
        TaskStatus(
            task_index=t.task_index,
            task_id=expand_row(st.job_id, st.compact, t)[0],
            state=TaskState(t.state),
            worker_id=t.worker_id,
            attempt=t.attempt,
            failure_count=t.failure_count,
            preemption_count=t.preemption_count,
            exit_code=t.exit_code if t.has_exit_code else None,
            error=t.error,
            peak_memory_bytes=t.peak_memory_bytes,
            cpu_seconds=t.cpu_seconds,
            duration_seconds=t.duration_seconds,
        )
        for t in st.tasks
    )
    return JobStatus(
        job_id=st.job_id,
        name=st.name,
        state=JobState(st.state or JobState.PENDING),
        num_tasks=st.num_tasks,
        task_state_counts=dict(st.task_state_counts),
        error=st.error,
        pending_reason=pending_reason,
        submitted_at=st.submitted_at,
        finished_at=st.finished_at or None,
        tasks=tasks,
        parent_job_id=st.parent_job_id,
        namespace=st.namespace,
        user=st.user,
        priority=st.priority or "interactive",
        effective_priority=st.effective_priority or st.priority or "interactive",
        preemptions=st.preemptions or sum(t.preemption_count for t in tasks),
        after=tuple(st.after),
        after_rule=st.after_rule,
        max_concurrent=st.max_concurrent,
    )


def _visible_status(job_id: str, memo: Mapping[str, Any], attrs: TypedSearchAttributes, started: float) -> JobStatus:
    """A job as visibility shows it (memo and search attributes), without its task table.

    A job started before the memo existed still has its state, name and user as search attributes.
    """
    view = JobView.from_memo(memo)
    state = view.state or attrs.get(JOB_STATE) or JobState.PENDING
    return JobStatus(
        job_id=job_id,
        name=attrs.get(JOB_NAME) or "",
        state=JobState(state),
        num_tasks=view.num_tasks or attrs.get(JOB_TASKS) or 0,
        task_state_counts=dict(view.counts),
        error=view.error,
        pending_reason=view.pending_reason,
        submitted_at=view.submitted_at or started,
        finished_at=view.finished_at or None,
        parent_job_id=attrs.get(JOB_PARENT) or "",
        namespace=attrs.get(JOB_NAMESPACE) or "",
        user=attrs.get(JOB_USER) or "",
        priority=attrs.get(JOB_PRIORITY) or "interactive",
        effective_priority=view.band or attrs.get(JOB_PRIORITY) or "interactive",
        preemptions=view.preemptions,
    )


def _visibility_query(state: str | None, user: str | None, name: str | None, parent: str | None = None,
                      namespace: str | None = None, under: str | None = None) -> str:
    """The list filter: every job workflow (also those started before IrisKind), narrowed by keyword.

    A job that continued as new has a closed run per hand-over; only its current run is the job.
    """
    given = {"user": user, "name": name, "parent": parent, "namespace": namespace, "under": under}
    for field, value in given.items():
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{field} must be a string, got {type(value).__name__} {value!r}")
    clauses = ["WorkflowType = 'JobWorkflow'", "ExecutionStatus != 'ContinuedAsNew'"]
    keywords = ((JOB_STATE, state), (JOB_USER, user), (JOB_NAME, name), (JOB_PARENT, parent),
                (JOB_NAMESPACE, namespace))
    for attr, value in keywords:
        if value is not None:
            clauses.append(f"{attr.name} = {_quoted(value)}")
    if under is not None:  # the whole subtree: ids read as paths
        clauses.append(f"WorkflowId STARTS_WITH {_quoted(under + JOB_ID_SEPARATOR)}")
    return " AND ".join(clauses)


def _quoted(value: str) -> str:
    """A string literal for a visibility query."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _failed_job_status(err: WorkflowFailureError) -> pb.JobStatus | None:
    """The status an unsuccessful job failed its workflow with (its details); None if it was ended otherwise."""
    details = getattr(err.cause, "details", ())
    return details[0] if details and isinstance(details[0], pb.JobStatus) else None


def _connect_reason(err: Exception) -> str:
    """The readable part of the SDK's connect error ("Connection refused", "dns error", ...); where something
    took the connection but did not answer as Temporal (a web server, the Temporal UI's port: "h2 protocol error",
    "transport error" or "operation was canceled"; a listener that says nothing: "Timeout expired"), a hint at
    which port to give."""
    text = str(err)
    found = re.search(r'message: "([^"]+)"', text) or re.search(r'ConnectError\("([^"]+)"', text)
    reason = found.group(1) if found else text
    if re.search(r"(?i)h2 protocol|http2|transport error|operation was canceled|timeout expired|timed out", reason):
        reason += " (not Temporal's frontend? `iris cluster status` prints its address as Temporal:)"
    return reason


def _start_attributes(req: pb.JobRequest) -> TypedSearchAttributes:
    """The search attributes a new job's workflow starts with (what `_visible_status` reads back)."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(JOB_STATE, JobState.PENDING.value),
            SearchAttributePair(JOB_NAME, req.name),
            SearchAttributePair(JOB_USER, req.user),
            SearchAttributePair(JOB_PRIORITY, req.band or "interactive"),
            SearchAttributePair(JOB_TASKS, req.replicas),
            SearchAttributePair(KIND, JOB_KIND),
            SearchAttributePair(JOB_NAMESPACE, req.namespace),
            *([SearchAttributePair(JOB_PARENT, req.parent_job_id)] if req.parent_job_id else []),
        ]
    )


def _worker_status(w: pb.WorkerStatus) -> WorkerStatus:
    """One worker as the scheduler's `workers` query lists it."""
    return WorkerStatus(
        worker_id=w.worker_id,
        healthy=w.healthy,
        attributes={k: get_attr(v) for k, v in w.attributes.items()},
        cpu=w.capacity.cpu_millis / 1000,
        memory_bytes=w.capacity.memory_bytes,
        running_tasks=tuple(w.running_tasks),
        gpus=w.capacity.gpus,
        tpus=w.capacity.tpus,
        cordoned=w.cordoned,
    )
