"""WorkerWorkflow: liveness of one worker agent, carried by activity heartbeats.

A long-running `worker_session` activity runs on the worker's own queue and
heartbeats every second. Heartbeats add no history events, so an idle worker
costs nothing; when they stop for the session's heartbeat timeout (0.6 x the
agent's --heartbeat-timeout: 6 s by default), or the agent shuts down, the
scheduler is told the worker is lost and this workflow ends. A restarted
agent registers a new session and starts a fresh WorkerWorkflow.

Registration (for agents that set `announced`): the agent signals
`register_workers` with this workflow as `reply_to`, through the registrar
(registrar_workflow.py), then waits on this workflow's `registration` update,
which returns the scheduler's answer. No update ever waits on the singleton, so
10,000 agents can register at once. The session's end goes through the registrar
too, behind its registration.

Each session has a monitor of its own (the workflow id names the session), so
an agent that claims a worker id already in use never touches the running
agent's monitor: it only waits for its refusal. The monitor waits for the
answer even when its session ended first (a duplicate's session activity can
reach the other agent on their shared queue and be turned away as stale), and a
refused one stays until the agent has read why.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
        REGISTER_AGAIN,
        REGISTER_WORKERS,
        REGISTERED,
        REGISTRAR_WORKFLOW_ID,
        REGISTRATION_UPDATE,
        SCHEDULER_WORKFLOW_ID,
        WORKER_LOST,
        WORKER_SESSION,
        WorkerSessionInput,
        heartbeat_timeout_seconds,
        worker_task_queue,
    )
    from activities.proto import cluster_pb2 as pb
    from activities.proto.values import binary_payload
    from workflows.messages import RegistrationReply, WorkerLost

SESSION_HEARTBEAT_TIMEOUT = timedelta(seconds=6)  # an agent's with the default heartbeat timeout (10 s)
# The session's timeout is this share of the agent's heartbeat timeout (its --heartbeat-timeout): a lost worker
# takes no new work a while before its running attempts time out.
SESSION_TIMEOUT_SHARE = SESSION_HEARTBEAT_TIMEOUT.total_seconds() / DEFAULT_HEARTBEAT_TIMEOUT_SECONDS
SESSION_START_TIMEOUT = timedelta(seconds=30)
# How long a monitor whose session ended (or was refused) waits for the scheduler's answer and for
# the agent to read it: bounded, as the agent that would read it may be gone.
ANSWER_WAIT = timedelta(seconds=60)


def session_heartbeat_timeout(agent_heartbeat_timeout: float) -> timedelta:
    """The session's heartbeat timeout for an agent that declared this one (0: none, the default 6 s)."""
    if not agent_heartbeat_timeout:
        return SESSION_HEARTBEAT_TIMEOUT
    return timedelta(seconds=round(SESSION_TIMEOUT_SHARE * heartbeat_timeout_seconds(agent_heartbeat_timeout), 3))


@workflow.defn(name="WorkerWorkflow", versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class WorkerWorkflow:
    def __init__(self) -> None:
        self._reply: RegistrationReply | None = None
        self._input: WorkerSessionInput | None = None
        self._registering: asyncio.Task[None] | None = None
        self._answered = False  # the agent read the reply through the `registration` update

    @workflow.run
    async def run(self, session: WorkerSessionInput) -> str:
        self._input = session
        hosts = [session.worker_id, *session.more_worker_ids]
        workflow.set_current_details(f"worker {session.worker_id}: healthy")
        reason = "session ended"
        liveness = asyncio.ensure_future(self._session(session))
        if session.announced:
            await self._wait(lambda: self._reply is not None)
            refused = self._reply.refused if self._reply is not None else {}
            hosts = [h for h in hosts if h not in refused]
            if not hosts:  # nothing to watch: end the session instead of waiting for it to time out
                liveness.cancel()
        try:
            await liveness
        except ActivityError as err:
            reason = str(err.cause) if err.cause else err.message
        except asyncio.CancelledError:
            reason = "registration refused"
        if session.announced and self._reply is not None and not hosts:
            # Refused: the agent is told why before the monitor ends. (A lost worker is reported at once.)
            await self._wait(lambda: self._answered)
        if hosts:
            await _to_scheduler(WORKER_LOST, WorkerLost(hosts[0], session.session, reason, hosts[1:]))
        workflow.set_current_details(f"worker {session.worker_id}: lost ({reason})")
        return reason

    @staticmethod
    async def _wait(condition: Callable[[], bool]) -> None:
        """Wait for `condition`, at most ANSWER_WAIT (the agent that would make it true may be gone)."""
        if not condition():
            with contextlib.suppress(asyncio.TimeoutError):
                await workflow.wait_condition(condition, timeout=ANSWER_WAIT)

    @staticmethod
    async def _session(session: WorkerSessionInput) -> None:
        await workflow.execute_activity(
            WORKER_SESSION,
            session,
            task_queue=session.task_queue or worker_task_queue(session.worker_id),
            schedule_to_start_timeout=SESSION_START_TIMEOUT,
            start_to_close_timeout=timedelta(days=3650),
            heartbeat_timeout=session_heartbeat_timeout(session.heartbeat_timeout_seconds),
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
        )

    @workflow.signal(name=REGISTERED)
    def registered(self, reply: RegistrationReply) -> None:
        self._reply = reply

    @workflow.signal(name=REGISTER_AGAIN)
    def register_again(self) -> None:
        """A scheduler that started empty asks: send the agent's registration again, as the agent did."""
        if self._input is not None and self._input.registration and self._registering is None:
            self._registering = asyncio.get_running_loop().create_task(self._register(self._input.registration))

    async def _register(self, registration: str) -> None:
        # Binary, as the agent sends it (activities.proto.values.binary_payload): the SDK's converter writes a
        # message as JSON, which the scheduler parses field by field in Python. A rebuilt scheduler hears
        # every agent's batch again at once: 82 batches (8,200 hosts) took its task 0.59 s of JSON parsing.
        batch = binary_payload(pb.WorkerBatch.FromString(base64.b64decode(registration)))
        try:  # a rebuilt scheduler hears every monitor at once: through the registrar, as the agent sends it
            await _to_scheduler(REGISTER_WORKERS, batch)
        except Exception as err:  # no scheduler (again): the next one asks again
            workflow.logger.warning("registration not sent again: %s", err)
        finally:
            self._registering = None

    @workflow.update(name=REGISTRATION_UPDATE)
    async def registration(self) -> RegistrationReply:
        """The scheduler's answer to this session's `register_workers`, once it came."""
        await workflow.wait_condition(lambda: self._reply is not None)
        assert self._reply is not None
        self._answered = True
        return self._reply


async def _to_scheduler(signal: str, arg: object) -> None:
    """Signal the scheduler through the registrar (workflows/fleet/registrar_workflow.py), which keeps a session's
    registration and its end in order; straight where there is no registrar (a controller of an earlier release
    started the scheduler)."""
    try:
        await workflow.get_external_workflow_handle(REGISTRAR_WORKFLOW_ID).signal(signal, arg)
    except Exception:  # no registrar
        await workflow.get_external_workflow_handle(SCHEDULER_WORKFLOW_ID).signal(signal, arg)
