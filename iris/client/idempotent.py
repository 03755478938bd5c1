"""Idempotent submission (`if_exists=` with a `name`), on Temporal's workflow-id conflict policies.

Every job keeps a unique id (logs, results and the Temporal UI are keyed by it), yet two clients
submitting the same name at once must agree on one job. So the id of the job a named submit starts
is not random: it is derived from the user, namespace, name and id of the newest job of that name
before it (its *successor* id). Two racing submits read the same newest job from visibility, derive
the same id, and Temporal's conflict policy decides: `USE_EXISTING` hands the second `reuse` the job
the first started, `FAIL` refuses the second `fail`. Ids are never reused (`REJECT_DUPLICATE`): a
derived id that already ended (visibility lagging behind it) moves the submit on to its successor.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from activities.contracts import JOB_NAME_ATTRIBUTE, JOB_NAMESPACE_ATTRIBUTE, JOB_USER_ATTRIBUTE
from activities.proto import cluster_pb2 as pb
from iris.client.child_jobs import child_job_id
from iris.client.job_control import IfExists
from workflows.states import JobState
from workflows.visibility import JOB_STATE

ENDED_BADLY = frozenset({JobState.FAILED, JobState.KILLED, JobState.UNSCHEDULABLE})
_CLOSED_BADLY = frozenset({WorkflowExecutionStatus.FAILED, WorkflowExecutionStatus.TERMINATED,
                           WorkflowExecutionStatus.CANCELED, WorkflowExecutionStatus.TIMED_OUT})  # fmt: skip
MAX_NAMED = 1_000  # jobs of one name read from visibility to find the newest
MAX_HOPS = 20  # successor ids tried when visibility lags behind jobs that ended


@dataclass(frozen=True)
class Named:
    """A job of the name as visibility lists it."""

    job_id: str
    started: float
    state: str  # its IrisJobState
    ended_badly: bool
    running: bool


def successor_id(req: pb.JobRequest, previous: str) -> str:
    """The id of the job that follows `previous` ("" for none) under `req`'s user, name and namespace."""
    slug = re.sub(r"[^a-z0-9]+", "-", req.name.lower()).strip("-")[:40] or "job"
    digest = hashlib.sha256(f"{req.user}\0{req.namespace}\0{req.name}\0{previous}".encode()).hexdigest()[:10]
    return child_job_id(req.parent_job_id, f"{slug}-{digest}")


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _named(wf: WorkflowExecution) -> Named:
    state = wf.typed_search_attributes.get(JOB_STATE) or ""
    closed_badly = wf.status in _CLOSED_BADLY
    return Named(
        job_id=wf.id,
        started=wf.start_time.timestamp(),
        state=state,
        ended_badly=state in ENDED_BADLY or closed_badly,
        running=wf.status == WorkflowExecutionStatus.RUNNING,
    )


async def jobs_named(temporal: Client, req: pb.JobRequest) -> list[Named]:
    """The jobs of `req`'s user of `req`'s name in its namespace (each job's current run), newest first.

    A name is the user's own: another user's job of that name (one may submit into any namespace) is
    never reused nor refused for them, as a Slurm job name is per user."""
    query = (
        f"WorkflowType = 'JobWorkflow' AND ExecutionStatus != 'ContinuedAsNew' AND "
        f"{JOB_NAME_ATTRIBUTE} = {_quoted(req.name)} AND {JOB_NAMESPACE_ATTRIBUTE} = {_quoted(req.namespace)} "
        f"AND {JOB_USER_ATTRIBUTE} = {_quoted(req.user)}"
    )
    found = [_named(wf) async for wf in temporal.list_workflows(query, limit=MAX_NAMED)]
    found = [n for n in found if _under(n.job_id, req.parent_job_id)]
    return sorted(found, key=lambda n: (n.started, n.job_id), reverse=True)


def _under(job_id: str, parent: str) -> bool:
    """Whether `job_id` is a child of `parent` (a root job when `parent` is ""): names are per parent."""
    head, _, _ = job_id.rpartition("/")
    return head == parent


@dataclass(frozen=True)
class Plan:
    """What a named submit does: return an existing job, or start one under `job_id` with these policies."""

    existing: str = ""
    job_id: str = ""
    start_options: dict[str, Any] | None = None


async def plan(temporal: Client, req: pb.JobRequest, mode: IfExists) -> Plan:
    """The job a `reuse` returns, or the id and policies to start one with; ValueError for a refused `fail`."""
    named = await jobs_named(temporal, req)
    if mode is IfExists.REUSE:
        for n in named:
            if n.ended_badly:
                continue
            # Visibility lags: a job it still lists as running may have ended since. Its workflow says.
            ended = await describe_closed(temporal, n.job_id) if n.running else None
            if ended is None or not ended.ended_badly:
                return Plan(existing=n.job_id)
        options = {"id_conflict_policy": WorkflowIDConflictPolicy.USE_EXISTING,
                   "id_reuse_policy": WorkflowIDReusePolicy.REJECT_DUPLICATE}  # fmt: skip
    else:
        for n in named:  # as for `reuse`: a job listed as running that has ended since does not refuse
            if n.running and await describe_closed(temporal, n.job_id) is None:
                raise ValueError(f"if_exists='fail': job {n.job_id} named {req.name!r} is {n.state or 'RUNNING'}")
        options = {"id_conflict_policy": WorkflowIDConflictPolicy.FAIL,
                   "id_reuse_policy": WorkflowIDReusePolicy.REJECT_DUPLICATE}  # fmt: skip
    return Plan(job_id=successor_id(req, named[0].job_id if named else ""), start_options=options)


async def describe_closed(temporal: Client, job_id: str) -> Named | None:
    """The job `job_id` when it has ended (for a derived id visibility did not list yet); None if running."""
    desc = await temporal.get_workflow_handle(job_id).describe()
    if desc.status == WorkflowExecutionStatus.RUNNING:
        return None
    state = desc.typed_search_attributes.get(JOB_STATE) or ""
    return Named(job_id, desc.start_time.timestamp(), state, state in ENDED_BADLY or desc.status in _CLOSED_BADLY,
                 running=False)  # fmt: skip


Starter = Callable[[str, dict[str, Any]], Awaitable[Any]]  # start the job under this id with these id policies


async def start_named(temporal: Client, req: pb.JobRequest, first: Plan, mode: IfExists, start: Starter) -> str:
    """Start the job under the planned id (`start(job_id, policies)`); the id of the job the submit stands for.

    A `reuse` that meets a running job of that id joins it (USE_EXISTING); an id that has ended already
    (visibility had not listed it yet) is skipped for its successor, or returned when `reuse` may take it.
    """
    assert first.start_options is not None and first.job_id
    job_id = first.job_id
    for _ in range(MAX_HOPS):
        req.job_id = job_id
        try:
            await start(job_id, first.start_options)
            return job_id
        except WorkflowAlreadyStartedError:
            ended = await describe_closed(temporal, job_id)
            if ended is None:  # running: only `fail` gets here (`reuse` joins it)
                raise ValueError(f"if_exists='fail': job {job_id} named {req.name!r} is running") from None
            if mode is IfExists.REUSE and not ended.ended_badly:
                return job_id
            job_id = successor_id(req, job_id)
    raise RuntimeError(f"if_exists={mode.value!r}: no free id for {req.name!r} after {MAX_HOPS} tries; submit again")
