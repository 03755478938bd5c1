"""Killing what is left of an ended job's tree: its unfinished descendants (the side effect of job trees).

A job's end runs `kill_descendants` (a durable activity, retried until it succeeds, heartbeating
so a controller killed in the middle hands it to another within seconds). It signals KILL_JOB to
every running job whose id starts with the ended job's id and `/` (one visibility query), and to
the children the job heard of most recently by id (visibility may not list a child that started a
moment ago yet). Signals are idempotent: a retry signals again, a job that has ended meanwhile is
skipped. Each killed job kills its tasks and then sweeps its own subtree the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog
from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError

from activities.contracts import JOB_ID_SEPARATOR, KILL_DESCENDANTS, KILL_JOB, KillDescendants, parent_job_of

log = structlog.get_logger("iris.client.child_jobs")

MAX_SIGNALS_IN_FLIGHT = 50


def kill_reason(ended_id: str, what: str, target_id: str) -> str:
    """Why `target_id` was killed: the error its JobStatus shows, naming the job whose end killed it.

    `what` says what became of that job, e.g. "ended (SUCCEEDED)" or "was killed".
    """
    kin = "parent" if parent_job_of(target_id) == ended_id else "ancestor"
    return f"killed: its {kin} job {ended_id} {what}"


def quoted(value: str) -> str:
    """A string literal for a visibility query."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def descendants_query(job_id: str, running_only: bool = True) -> str:
    """Visibility filter: the jobs below `job_id` (only those still running, by default); no task."""
    query = f"WorkflowType = 'JobWorkflow' AND WorkflowId STARTS_WITH {quoted(job_id + JOB_ID_SEPARATOR)}"
    return query + (" AND ExecutionStatus = 'Running'" if running_only else "")


async def running_descendants(client: Client, job_id: str, heartbeat: bool = False) -> list[str]:
    """Ids of the jobs below `job_id` that visibility lists as running, shallowest first (`heartbeat`: beat for
    each one listed, so a long listing of a big tree does not outlast the sweep's heartbeat timeout)."""
    ids = []
    async for wf in client.list_workflows(descendants_query(job_id)):
        ids.append(wf.id)
        if heartbeat:
            activity.heartbeat()  # the SDK sends one at most every 0.8 x the heartbeat timeout
    return sorted(ids, key=lambda i: (i.count(JOB_ID_SEPARATOR), i))


async def signal_kill(client: Client, job_id: str, reason: str) -> bool:
    """Send KILL_JOB to `job_id`; False when it has ended already (or never existed)."""
    try:
        await client.get_workflow_handle(job_id).signal(KILL_JOB, reason)
    except RPCError as err:
        text = str(err).lower()
        if "already completed" in text or "not found" in text:
            return False
        raise
    return True


async def kill_tree(client: Client, job_id: str, what: str, also: Sequence[str] = (), heartbeat: bool = False) -> int:
    """Kill every running descendant of `job_id` (and the jobs in `also`); how many were still running.

    `what` became of `job_id` ("ended (FAILED)", "was killed") goes into each one's error.
    """
    targets = list(dict.fromkeys([*also, *await running_descendants(client, job_id, heartbeat)]))
    gate = asyncio.Semaphore(MAX_SIGNALS_IN_FLIGHT)

    async def kill(target: str) -> bool:
        async with gate:
            killed = await signal_kill(client, target, kill_reason(job_id, what, target))
            if heartbeat:
                activity.heartbeat()
            return killed

    killed = sum(await asyncio.gather(*(kill(t) for t in targets)))
    if targets and activity.in_activity():  # the controller's log; a client's caller has the result, not a log line
        log.info("job_tree.killed_descendants", job_id=job_id, what=what, found=len(targets), killed=killed)
    return killed


@activity.defn(name=KILL_DESCENDANTS)
async def kill_descendants(inp: KillDescendants) -> int:
    """Kill the ended job's unfinished descendants; how many were still running. Idempotent."""
    activity.heartbeat()
    what = f"ended ({inp.state})"
    return await kill_tree(activity.client(), inp.job_id, what, inp.recent_children, heartbeat=True)
