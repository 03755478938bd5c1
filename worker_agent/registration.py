"""Registering hosts with the scheduler without an update on the singleton.

The agent starts its WorkerWorkflow (the liveness monitor) first, then signals
the scheduler `register_workers` with a batch of hosts and that workflow as
`reply_to`, and waits on the monitor's `registration` update for the answer. The hosts go as rows the agent
checked (activities/contracts/worker_rows.py): a host it refuses itself is never sent.
Signals have no in-flight limit, so 10,000 agents registering at once queue
nothing on the singleton; a refusal still comes back with its reason. The
signal is sent again if no answer comes (registering is idempotent), for as long as it takes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any, TypeVar

import structlog
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import (
    CONTROL_TASK_QUEUE,
    KIND_ATTRIBUTE,
    REGISTER_WORKERS,
    REGISTRAR_WORKFLOW_ID,
    REGISTRATION_UPDATE,
    SCHEDULER_WORKFLOW_ID,
    WORKER_KIND,
    WorkerSessionInput,
    worker_workflow_id,
)
from activities.contracts.worker_rows import batch_of_rows
from activities.proto import cluster_pb2 as pb
from activities.proto.values import binary_payload
from worker_agent.backoff import Backoff, pause

log = structlog.get_logger("iris.agent")

WORKER_WORKFLOW = "WorkerWorkflow"  # started by name: the agent does not import workflow code
ANSWER_WAIT_SECONDS = 20.0  # ask again after this long without an answer (the default; `answer_wait` sets it)
_T = TypeVar("_T")
RETRY_CAP_SECONDS = 5.0  # the longest pause between two tries: a restarted controller is found within it
# The longest pause while the server answers that the scheduler does not exist yet: its controller is starting
# (a cluster coming up starts its agents beside it). One cheap refused signal a second per agent, for seconds;
# with the 5 s cap, an agent that began asking early found the scheduler up to 5 s late, at every cluster start.
NOT_STARTED_CAP_SECONDS = 1.0


class SchedulerNotStarted(Exception):  # noqa: N818 - reads as the outcome it names
    """The server has no scheduler workflow yet (its controller has not started it)."""


async def register_hosts(
    client: Client,
    session: WorkerSessionInput,
    hosts: list[pb.WorkerMetadata],
    timeout: float | None = None,
    stop: asyncio.Event | None = None,
    answer_wait: float = ANSWER_WAIT_SECONDS,
) -> dict[str, str] | None:
    """Register `hosts` under one liveness session; the refused ones, worker id -> reason.

    Every failure to reach Temporal or the scheduler, whatever its exception class (an
    unreachable server, a controller that is down so the update times out, a monitor that
    ended meanwhile), is tried again after a capped, jittered backoff: forever, or until
    `timeout` seconds have passed (then RuntimeError). None once `stop` is set. Each try waits
    `answer_wait` seconds for the scheduler's answer before it asks again.
    """
    if not answer_wait > 0:
        raise ValueError(f"answer_wait: must be > 0 seconds, got {answer_wait}")
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    monitor_id = worker_workflow_id(session.worker_id, session.session)
    batch, refused_here = batch_of_rows(hosts, monitor_id)  # checked here, kept as rows by the scheduler
    if not batch.rows:
        return refused_here
    session = dataclasses.replace(session, registration=base64.b64encode(batch.SerializeToString()).decode())
    backoff = Backoff(first=0.2, cap=RETRY_CAP_SECONDS)
    not_started = Backoff(first=0.2, cap=NOT_STARTED_CAP_SECONDS)
    monitor_started = False
    # Through the registrar until a try goes unanswered: a registrar no controller runs (one of an earlier release
    # after a rollback) would hold the registration; the scheduler itself hears every later try.
    via_registrar = True

    async def attempt(start_monitor: bool) -> Any:
        """One try: the monitor (if asked), the signal, then the answer or a timeout."""
        nonlocal monitor_started
        if start_monitor:
            # The liveness monitor starts first: a worker is never registered without one,
            # so an agent that dies right after registering is still reported lost. Asking
            # again (a lost answer) finds this session's monitor already there, or starts it
            # again if it ended meanwhile (its session timed out while the server was away).
            await client.start_workflow(
                WORKER_WORKFLOW,
                session,
                id=monitor_id,
                task_queue=CONTROL_TASK_QUEUE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                search_attributes=TypedSearchAttributes(
                    [SearchAttributePair(SearchAttributeKey.for_keyword(KIND_ATTRIBUTE), WORKER_KIND)]
                ),
                static_summary=f"worker {session.worker_id}" + (
                    f" and {len(session.more_worker_ids)} more" if session.more_worker_ids else ""
                ),
            )
            monitor_started = True
        await _send(client, batch, via_registrar)
        wait = answer_wait
        if deadline is not None:
            wait = max(1.0, min(wait, deadline - loop.time()))
        return await asyncio.wait_for(
            client.get_workflow_handle(monitor_id).execute_update(
                REGISTRATION_UPDATE, result_type=dict, rpc_timeout=timedelta(seconds=wait)
            ),
            wait,
        )

    while stop is None or not stop.is_set():
        try:
            reply = await _unless_stopped(attempt(not monitor_started), stop)
            if reply is None:
                break
            refused = reply.get("refused", {}) if isinstance(reply, dict) else {}
            return refused_here | {str(k): str(v) for k, v in refused.items()}
        except Exception as err:  # any failure to reach the control plane is tried again
            if deadline is not None and loop.time() > deadline:
                raise RuntimeError(f"could not reach the Iris scheduler: {describe_error(err)}") from err
            if isinstance(err, SchedulerNotStarted):  # the monitor is there: only the signal is asked again
                delay = not_started.next()
                attempts = not_started.attempts
            else:
                monitor_started = False  # cheap to ask again (USE_EXISTING), and it may have ended
                via_registrar = False
                delay = backoff.next()
                attempts = backoff.attempts
            log.warning(
                "registration_retry", worker_id=session.worker_id, attempt=attempts,
                retry_in=round(delay, 2), error=describe_error(err),
            )  # fmt: skip
            await pause(delay, stop)
    return None


async def _send(client: Client, batch: pb.WorkerBatch, via_registrar: bool) -> None:
    """Signal `batch` to the registrar (workflows/fleet/registrar_workflow.py), or to the scheduler where there is
    none (a controller of an earlier release) or `via_registrar` is False; SchedulerNotStarted when neither is."""
    payload = binary_payload(batch)
    if via_registrar:
        try:
            await client.get_workflow_handle(REGISTRAR_WORKFLOW_ID).signal(REGISTER_WORKERS, payload)
            return
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
    try:
        await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).signal(REGISTER_WORKERS, payload)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise SchedulerNotStarted(describe_error(err)) from err
        raise


async def _unless_stopped(work: Awaitable[_T], stop: asyncio.Event | None) -> _T | None:
    """`work`'s result, or None (`work` cancelled) as soon as `stop` is set: an RPC the SDK itself
    retries for seconds must not hold up an agent told to stop."""
    if stop is None:
        return await work
    job, stopping = asyncio.ensure_future(work), asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({job, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if job.done():
        return job.result()
    job.cancel()
    with contextlib.suppress(BaseException):
        await job
    return None


class RegistrationRefused(Exception):  # noqa: N818 - the name the CLI and callers already use
    """The scheduler refused this worker's metadata; the message says why."""


def describe_error(err: BaseException) -> str:
    """One line naming the failure: its class and first line (an update timeout says little more)."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
