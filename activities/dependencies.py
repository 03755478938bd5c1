"""`await_job`: the end state of a job another job depends on (workflows/jobs/job_dependencies.py).

One long poll on the job's workflow result (Temporal answers when the job's last run closes, at once
if it already has), with a heartbeat beside it: the waiting job's workflow sees a dead controller
within the heartbeat timeout and retries the activity elsewhere. Errors reaching Temporal (a server
restarting) are waited out here, with back-off; a server that refuses another long poll (too many
on the namespace) is watched through describe until the job closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import random

import structlog
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import CancelledError as TemporalCancelledError
from temporalio.exceptions import TerminatedError
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import AWAIT_JOB
from activities.proto import cluster_pb2 as pb

log = structlog.get_logger("iris.dependencies")

# Seconds between beats. The workflow's heartbeat timeout is 10 s (AWAIT_HEARTBEAT) and the SDK forwards at most one
# beat per 0.8 x that, 8 s: a beat every 5 s puts one in each of those windows, so the server hears one every 8 s,
# and a beat up to ~4 s late (a stalled event loop) still comes within the timeout. Only forwarded beats are calls:
# beating more often would cost the controller's event loop (10,000 waits at most), not Temporal.
HEARTBEAT_EVERY = 5.0
MAX_BACKOFF = 10.0
GONE = "GONE"
"""The state of a dependency Temporal no longer has (removed after its retention): not SUCCEEDED."""


def end_state(err: WorkflowFailureError) -> str:
    """The state a job that did not succeed ended in: from the JobStatus it failed with, else how it closed."""
    details = getattr(err.cause, "details", ())
    if details and isinstance(details[0], pb.JobStatus) and details[0].state:
        return details[0].state
    if isinstance(err.cause, (TerminatedError, TemporalCancelledError)):
        return "KILLED"  # ended from outside Iris (`temporal workflow terminate`, the UI's cancel)
    return "FAILED"  # timed out, or failed by something other than Iris


async def job_end_state(client: Client, job_id: str) -> str:
    """Wait until the job `job_id` has ended; its end state (JobState's value, or GONE)."""
    handle = client.get_workflow_handle(job_id, result_type=pb.JobStatus)
    delay = 1.0
    while True:
        try:
            status = await handle.result()
            return status.state or "SUCCEEDED"
        except WorkflowFailureError as err:
            return end_state(err)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return GONE
            if err.status == RPCStatusCode.RESOURCE_EXHAUSTED:
                closed = await _closed(handle, delay)
                if closed:
                    continue  # its result is there now: one short read
            log.warning("await_job_retry", job_id=job_id, error=err.message, retry_in=delay)
        except RuntimeError as err:  # the SDK's own transport errors (the server is restarting)
            log.warning("await_job_retry", job_id=job_id, error=str(err), retry_in=delay)
        await asyncio.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, MAX_BACKOFF)


async def _closed(handle: object, delay: float) -> bool:
    """Whether describe says the workflow has closed (polled with back-off while long polls are refused)."""
    while True:
        try:
            desc = await handle.describe()  # type: ignore[attr-defined]
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return True
            if err.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                return False
        else:
            if desc.status is not None and desc.status != WorkflowExecutionStatus.RUNNING:
                return True
        await asyncio.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, MAX_BACKOFF)


@activity.defn(name=AWAIT_JOB)
async def await_job(job_id: str) -> str:
    """The end state of the job `job_id`, once it has ended (heartbeating meanwhile). Idempotent."""

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY)

    beating = asyncio.create_task(beat())
    try:
        state = await job_end_state(activity.client(), job_id)
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
    log.info("dependency_ended", job_id=job_id, state=state, waiter=activity.info().workflow_id)
    return state
