"""The actions log, newest first, derived from Temporal's visibility records.

Every job, worker session and slice is a workflow, and visibility keeps each one's start and close
time, state (search attributes) and memo. An action is one of those moments: a job submitted or
ended (succeeded, failed, killed, unschedulable), a worker registered or lost, a slice created,
deleted or failed. So the log is durable across controller restarts (it is Temporal's own record),
bounded by the namespace's retention of closed workflows, and costs a few paged visibility calls
per page, never a query per job.

Visibility lists running workflows first (newest start first) and then closed ones by close time,
newest first. A page "before T" therefore merges, per kind of workflow, the running ones that started
before T with one page of the closed ones that closed before T; a closed workflow carries both of its
events. When that page of closed workflows was not the last, events older than its oldest close
time may still be missing, so the page stops there and the next page starts from it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.client import WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey

from activities.contracts import AUTOSCALER_WORKFLOW_ID, SCHEDULER_WORKFLOW_ID, SLICE_STATE_ATTRIBUTE
from iris.dashboard.reads import JOB_STATE, JOB_USER, ClusterReads, quoted, session_prefix
from workflows.visibility import JobView

SLICE_STATE = SearchAttributeKey.for_keyword(SLICE_STATE_ATTRIBUTE)
PAGE_SIZE = 50
CLOSED_SCAN = PAGE_SIZE
"""Closed workflows read per kind for one page: the page's events are complete down to the oldest of them."""
SUBMIT_SKEW_SECONDS = 5.0
"""A job run that started this much after the job's submission is a continued run, not the submission."""


@dataclass(frozen=True)
class Action:
    """One thing that happened, at `at` (epoch seconds), to a job, worker or slice."""

    at: float
    what: str  # e.g. "job submitted", "worker lost"
    kind: str  # "job" | "worker" | "slice"
    subject: str  # the job, worker or slice id
    workflow_id: str
    user: str = ""
    detail: str = ""
    ok: bool = True  # False for failures and losses (shown in red)


@dataclass(frozen=True)
class ActionFilter:
    """Narrow the log to one job (and its children), one user's jobs, or one worker."""

    job: str = ""
    user: str = ""
    worker: str = ""

    def sources(self) -> list[tuple[str, str]]:
        """(kind, visibility query) of each kind of workflow the filter keeps."""
        out = []
        if not self.worker:
            clauses = ["WorkflowType = 'JobWorkflow'"]
            if self.job:
                clauses.append(f"(WorkflowId = {quoted(self.job)} OR WorkflowId STARTS_WITH {quoted(self.job + '/')})")
            if self.user:
                clauses.append(f"{JOB_USER.name} = {quoted(self.user)}")
            out.append(("job", " AND ".join(clauses)))
        if not self.job and not self.user:
            workers = "WorkflowType = 'WorkerWorkflow'"
            if self.worker:
                workers += f" AND WorkflowId STARTS_WITH {quoted(session_prefix(self.worker))}"
            out.append(("worker", workers))
            if not self.worker:
                out.append(("slice", "WorkflowType = 'SliceWorkflow'"))
        return out

    def keeps(self, action: Action) -> bool:
        """Whether an action from the scheduler's or the autoscaler's own record passes the filter.

        Those records name no user, so a user filter keeps none of them; a worker filter keeps the
        worker's own actions and the placements that name it."""
        if self.user:
            return False
        if self.job:
            return action.kind == "job" and (action.subject == self.job or action.subject.startswith(self.job + "/"))
        if self.worker:
            named = self.worker in action.detail.replace(",", " ").split()
            return (action.kind == "worker" and action.subject == self.worker) or (action.kind == "job" and named)
        return True


def visibility_time(at: float) -> str:
    """A timestamp literal for a visibility query (RFC 3339, microseconds, UTC)."""
    return "'" + datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") + "'"


def _worker_id(workflow_id: str) -> str:
    return workflow_id.removeprefix("iris-worker-").rsplit("-session-", 1)[0]


def events(kind: str, wf: WorkflowExecution, memo: Mapping[str, Any]) -> list[Action]:
    """The actions one workflow record holds: its start, and its close if it has one."""
    started = wf.start_time.timestamp()
    closed = wf.close_time.timestamp() if wf.close_time and wf.status != WorkflowExecutionStatus.RUNNING else None
    status = wf.status.name if wf.status else ""
    out: list[Action] = []
    if kind == "job":
        user = wf.typed_search_attributes.get(JOB_USER) or ""
        view = JobView.from_memo(memo)
        if not view.submitted_at or started - view.submitted_at < SUBMIT_SKEW_SECONDS:
            out.append(Action(started, "job submitted", kind, wf.id, wf.id, user, f"{view.num_tasks} tasks"
                              if view.num_tasks != 1 else "1 task"))  # fmt: skip
        if closed is not None and wf.status != WorkflowExecutionStatus.CONTINUED_AS_NEW:
            state = view.state or wf.typed_search_attributes.get(JOB_STATE) or ""
            if state in ("", "PENDING", "RUNNING"):
                state = "KILLED" if status == "TERMINATED" else status or "ENDED"
                detail = f"workflow {status.lower().replace('_', ' ')}"
            else:
                detail = view.error
            out.append(Action(closed, f"job {state.lower()}", kind, wf.id, wf.id, user, detail, state == "SUCCEEDED"))
    elif kind == "worker":
        worker = _worker_id(wf.id)
        out.append(Action(started, "worker registered", kind, worker, wf.id, detail="liveness session started"))
        if closed is not None:
            detail = "session ended" if status == "COMPLETED" else f"session workflow {status.lower()}"
            out.append(Action(closed, "worker lost", kind, worker, wf.id, detail=detail, ok=False))
    elif kind == "slice":
        group = str(memo.get("scale_group", ""))
        out.append(Action(started, "slice created", kind, wf.id, wf.id, detail=f"scale group {group}"))
        ready_at = float(memo.get("ready_at") or 0.0)
        if ready_at:
            hosts = memo.get("hosts") or []
            out.append(Action(ready_at, "slice ready", kind, wf.id, wf.id, detail=f"{len(hosts)} hosts"))
        if closed is not None:
            state = wf.typed_search_attributes.get(SLICE_STATE) or ""
            failed = state == "FAILED" or status not in ("COMPLETED", "")
            what = "slice failed" if failed else "slice deleted"
            out.append(Action(closed, what, kind, wf.id, wf.id, detail=str(memo.get("error", "")), ok=not failed))
    return out


@dataclass
class Scan:
    """What one kind's listings gave for a page: events, and the time above which they are complete."""

    events: list[Action]
    complete_after: float  # -inf when the closed listing was read to its end


def merge(scans: Sequence[Scan], before: float, limit: int) -> tuple[list[Action], float | None]:
    """The newest `limit` events before `before` that every scan has complete; and the next page's cursor.

    The cursor is None when nothing older is left.
    """
    bound = max((s.complete_after for s in scans), default=float("-inf"))
    kept = (a for s in scans for a in s.events if bound <= a.at < before)
    found = sorted(kept, key=lambda a: (a.at, a.workflow_id), reverse=True)
    page = found[:limit]
    if len(found) > limit:
        return page, page[-1].at
    return page, (bound if bound != float("-inf") else None)


async def _scan(reads: ClusterReads, kind: str, query: str, before: float | None, limit: int) -> Scan:
    """One kind's events before `before` (None: the newest, with no time bound, so the query repeats
    exactly and viewers of the first page share one cached read)."""
    running, closed = f"{query} AND ExecutionStatus = 'Running'", f"{query} AND ExecutionStatus != 'Running'"
    if before is not None:
        cut = visibility_time(before)
        running, closed = f"{running} AND StartTime < {cut}", f"{closed} AND CloseTime < {cut}"
    running_page, closed_page = await asyncio.gather(
        reads.list_page(running, limit, None), reads.list_page(closed, CLOSED_SCAN, None)
    )
    rows = [*running_page.rows, *closed_page.rows]
    memos = await asyncio.gather(*(wf.memo() for wf in rows))
    found = [e for wf, memo in zip(rows, memos, strict=True) for e in events(kind, wf, memo)]
    complete_after = float("-inf")
    if closed_page.next_token is not None and closed_page.rows:
        last = closed_page.rows[-1].close_time
        complete_after = last.timestamp() if last else complete_after
    return Scan(found, complete_after)


def scheduler_action(row: Sequence[Any]) -> Action:
    """One row of the scheduler's recent actions (workflows/scheduler/scheduler_actions.py) as an action."""
    at, what, kind, subject, detail, ok = row
    workflow_id = subject if kind == "job" else SCHEDULER_WORKFLOW_ID
    return Action(float(at), str(what), str(kind), str(subject), workflow_id, detail=str(detail), ok=bool(ok))


async def _own_records(reads: ClusterReads, flt: ActionFilter) -> Scan:
    """What the scheduler and the autoscaler keep of their own decisions (bounded: the newest only).

    Never the page's bound: what fell out of those records is gone, and older pages come from visibility."""
    rows, status = await asyncio.gather(reads.scheduler_actions(), reads.autoscaler())
    found = [scheduler_action(row) for row in rows]
    for group in status.groups if status is not None else []:
        if group.last_decision and group.last_decision_at:
            found.append(Action(group.last_decision_at, "autoscaler decision", "group", group.name,
                                AUTOSCALER_WORKFLOW_ID, detail=group.last_decision))  # fmt: skip
    return Scan([a for a in found if flt.keeps(a)], float("-inf"))


async def recent_actions(
    reads: ClusterReads, flt: ActionFilter, before: float | None = None, limit: int = PAGE_SIZE
) -> tuple[list[Action], float | None]:
    """One page of the log, newest first, and the cursor of the next page (None at the end)."""
    scans = await asyncio.gather(
        *(_scan(reads, kind, query, before, limit) for kind, query in flt.sources()), _own_records(reads, flt)
    )
    return merge(scans, before if before is not None else float("inf"), limit)
