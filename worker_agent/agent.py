"""The worker agent: the daemon on one worker host.

It starts its WorkerWorkflow and registers the host with the scheduler through
it (worker_agent.registration: a refusal comes back with its reason). It polls
two task queues: its process's own for `worker_session` (liveness, heartbeats
only) from the start, and the worker's for `run_task` (one attempt of one task
through a ContainerRuntime, heartbeating while it runs and killing the process
group when cancelled) only once the scheduler has accepted it, so an agent
refused for a worker id another agent serves never takes that agent's tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import tempfile
import time
import uuid
import zipfile
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import structlog
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.coalescer import SignalCoalescer
from activities.contracts import (
    CORDON_WORKERS,
    DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
    LEASE_EXPIRED,
    LEASE_EXPIRED_REASON,
    MAX_RELEASE_BATCH,
    PROCESS_STARTED,
    RELEASE_BATCH,
    RESERVATION_ENV,
    RUN_TASK,
    SCHEDULER_WORKFLOW_ID,
    STOP_TASK,
    UNVERSIONED_BUILD_ID,
    WORKER_SESSION,
    Release,
    RunTaskInput,
    RunTaskResult,
    StopTask,
    TaskStarted,
    WorkerSessionInput,
    agent_session_queue,
    parent_job_of,
    worker_task_queue,
)
from activities.home import iris_home
from activities.proto import cluster_pb2 as pb
from activities.proto.values import set_attr
from worker_agent.agent_config import AgentConfig
from worker_agent.backoff import Backoff, pause
from worker_agent.bundles import Bundles
from worker_agent.checkpoints import CHECKPOINT_DIR_ENV, is_local, make_local, task_checkpoint_dir
from worker_agent.distributed_env import distributed_env, endpoints, host_address
from worker_agent.launches import Launches, LaunchUnreadableError
from worker_agent.leases.lease import AttemptLease, Beat, run_leased
from worker_agent.object_store import open_blob_store, open_log_store
from worker_agent.preemption import (
    NOTICE_FILE_ENV,
    NOTICE_FILE_NAME,
    GcpNoticeWatcher,
    Notice,
    post_notice_file,
)
from worker_agent.registration import RegistrationRefused, register_hosts
from worker_agent.registration import describe_error as _describe
from worker_agent.runtimes.base import (
    ContainerRuntime,
    LeasedRuntime,
    Mount,
    RuntimeName,
    TaskExit,
    TaskHandle,
    TaskSpec,
    TaskStartError,
)
from worker_agent.runtimes.process import ProcessRuntime
from worker_agent.state_lock import AgentStateLock
from worker_agent.storage import BlobNotFoundError, StorageError
from worker_agent.task_access import RunningTasks, TaskAccess
from worker_agent.task_area import TaskArea, stage_runner_code
from worker_agent.task_runner import read_task_error, task_runner_argv
from worker_agent.task_token import TOKEN_FILE_ENV, TaskTokens
from worker_agent.tpu_metadata import metadata_server_configured
from worker_agent.usage import TaskUsage, sampling

log = structlog.get_logger("iris.agent")
_T = TypeVar("_T")

# The figures below are for the default heartbeat timeout (10 s); an agent with another (--heartbeat-timeout)
# scales them with it (`_Pacing`), as its session's timeout (0.6 x its heartbeat timeout) and its attempts' are.
HEARTBEAT_SECONDS = 1.0  # the session's beat (never less often: SESSION_SILENCE_SECONDS counts them)
# The SDK forwards at most one heartbeat per 0.8 x heartbeat timeout unless told otherwise. The
# session's every 2 s instead (of its 6 s timeout): a Temporal outage of up to ~4 s (not ~1 s) does
# not make the worker look lost.
HEARTBEAT_FORWARD_SECONDS = 2.0
# The task queue's activities: run_task's heartbeats that count are the lease's own (every lease
# interval, worker_agent/leases/lease.py), which also bring a kill to the attempt; the SDK's copies only keep
# the SDK from timing the activity out locally, so they go no more often than 0.8 x run_task's 10 s.
TASK_HEARTBEAT_FORWARD_SECONDS = 8.0
# The WorkerWorkflow gives the session activity 30 s to start (SESSION_START_TIMEOUT); a session
# that has not started or beaten for longer than this is over, whatever the server thinks.
SESSION_SILENCE_SECONDS = 45.0
WORKER_RESTART_SECONDS = 2.0  # first pause before polling again after the Temporal worker itself failed
WORKER_RESTART_CAP_SECONDS = 10.0  # the longest pause when it keeps failing
STOP_REPORT_SECONDS = 2.0  # how long a stopping agent tries to tell Temporal its tasks were killed
WORKER_SHUTDOWN = "WorkerShutdown"  # workflows.tasks.task_workflow.WORKER_SHUTDOWN


@dataclass(frozen=True)
class _Pacing:
    """How often the agent beats and the SDK forwards, for the agent's heartbeat timeout: the defaults' ratios."""

    session_beat: float
    session_forward: float
    task_forward: float

    @classmethod
    def of(cls, heartbeat_timeout: float) -> _Pacing:
        scale = heartbeat_timeout / DEFAULT_HEARTBEAT_TIMEOUT_SECONDS
        return cls(min(HEARTBEAT_SECONDS, HEARTBEAT_SECONDS * scale), HEARTBEAT_FORWARD_SECONDS * scale,
                   TASK_HEARTBEAT_FORWARD_SECONDS * scale)  # fmt: skip


def metadata(config: AgentConfig, session: str) -> pb.WorkerMetadata:
    meta = pb.WorkerMetadata(
        worker_id=config.worker_id, runtime=config.runtime, host=socket.gethostname(), agent_session=session,
        address=config.address or host_address(), port_range_start=config.port_range[0],
        port_range_end=config.port_range[1], heartbeat_timeout_seconds=config.lease.heartbeat_timeout,
    )
    meta.capacity.cpu_millis = config.cpu_millis
    meta.capacity.memory_bytes = config.memory_bytes
    meta.capacity.gpus = config.gpus
    meta.capacity.tpus = config.tpus
    for key, value in config.attributes.items():
        set_attr(meta.attributes[key], value)
    return meta


class WorkerAgent:
    def __init__(self, client: Client, config: AgentConfig, runtime: ContainerRuntime | None = None) -> None:
        self.client = client
        self.config = config
        self.runtime = runtime or ProcessRuntime(ledger_dir=config.state_dir, lease_seconds=config.lease.seconds)
        self.session = uuid.uuid4().hex
        self.pacing = _Pacing.of(config.lease.heartbeat_timeout)
        self.instance = uuid.uuid4().hex[:16]  # this process: names its session queue and its pollers
        self.blobs = open_blob_store(config.store_url)
        self._task_tokens = TaskTokens(self.blobs)  # team mode: each attempt's token for the Iris API
        self.logs = open_log_store(config.store_url.rstrip("/") + "/logs")
        self.state_lock = AgentStateLock(config.state_dir)
        self.task_root = config.task_dir or default_task_dir(config.state_dir)
        self.bundles = Bundles(self.task_root / "bundles", self.blobs)
        self.launches = Launches(self.blobs)
        self._staged_runner: str | None = None
        self.log = log.bind(worker_id=config.worker_id)
        self._session_lost = asyncio.Event()
        self._last_beat = 0.0  # loop time of the current session's last heartbeat (or registration)
        self._activities = 0  # run_task activities in progress
        self._no_activity = asyncio.Event()  # set while there are none
        self._no_activity.set()
        # Tasks that end together (one agent serves many hosts, or many short tasks) free their
        # places in one signal to the scheduler.
        self._releases = SignalCoalescer(client, SCHEDULER_WORKFLOW_ID, RELEASE_BATCH, MAX_RELEASE_BATCH)
        # The tasks running here by (job id, task index): their runtime handle, attempt and spec,
        # for `task exec` and `task profile` (worker_agent.task_access).
        self._running: RunningTasks = {}
        self.access = TaskAccess(self.runtime, self._running, self.blobs, config.store_url)
        self._ran: dict[tuple[str, int, int], float] = {}  # attempt -> seconds its process ran, until released
        self._handles: dict[tuple[str, int, int], TaskHandle] = {}  # running attempts, for stop_task
        # The host's preemption notice (worker_agent.preemption), once one came: every attempt then
        # running is stopped and reported as preempted; none starts after it.
        self.notice: Notice | None = None
        self._notice_files: dict[tuple[str, int, int], Path] = {}  # attempt -> its IRIS_PREEMPTION_NOTICE_FILE
        self._preempted: dict[tuple[str, int, int], str] = {}  # attempt -> why it was stopped
        # Attempts stopped at their workflow's word (a kill's stop_task, or a cancellation: a kill, or an eviction
        # whose stop did not reach this agent): a zero exit after it is not a success.
        self._killed: set[tuple[str, int, int]] = set()
        self._stopping: set[asyncio.Task[Any]] = set()

    # -- lifecycle -------------------------------------------------------------------------

    async def register(self, timeout: float | None = None, stop: asyncio.Event | None = None) -> bool:
        """Register with the scheduler and start this session's WorkerWorkflow, waiting for the control plane.

        Waits as long as Temporal or the scheduler stays unreachable (or `timeout` seconds, then
        RuntimeError); False if `stop` was set first. RegistrationRefused if the scheduler rejects
        the metadata.
        """
        loop = asyncio.get_running_loop()
        session = WorkerSessionInput(
            self.config.worker_id, self.session, announced=True,
            task_queue=agent_session_queue(self.config.worker_id, self.instance),
            heartbeat_timeout_seconds=self.config.lease.heartbeat_timeout,
        )  # fmt: skip
        # Cleared before, not after: a session the server ends during the registration is then still lost.
        self._session_lost.clear()
        refused = await register_hosts(
            self.client, session, [metadata(self.config, self.session)], timeout, stop,
            answer_wait=self.config.registration_answer_wait_seconds,
        )  # fmt: skip
        if refused is None:
            return False
        if refused:
            raise RegistrationRefused(next(iter(refused.values())))
        self._last_beat = loop.time()
        self.log.info("worker_registered", session=self.session, attributes=self.config.attributes)
        return True

    async def serve(self, stop: asyncio.Event | None = None) -> None:
        """Run until SIGTERM/SIGINT (or `stop` is set); running tasks are killed and reported as preempted.

        The agent never gives up on the control plane: registering waits for as long as
        Temporal or the scheduler stays away (retrying with a capped, jittered backoff);
        when its session ends without it stopping (the agent was paused past the heartbeat
        timeout, the Temporal server was down or lost its state) it registers a fresh one;
        when the Temporal worker itself fails it starts a new one. Only SIGTERM/SIGINT ends
        it, promptly even while Temporal is unreachable, or a configuration error:
        RegistrationRefused, AgentAlreadyRunning if another agent with this worker id runs here.
        """
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        self.state_lock.lock()
        watcher = self._watch_notices(loop)
        try:
            recovered = await self.runtime.recover()
            if recovered:
                self.log.warning(
                    "killed_leftover_tasks", runtime=str(self.runtime.name),
                    tasks=[r.task_id or r.handle for r in recovered],
                )
            await self._serve(stop)
            self.log.info("worker_stopping")
        finally:
            if watcher is not None:
                watcher.stop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            self.state_lock.unlock()
            await self.runtime.close()
            with contextlib.suppress(OSError):  # its tasks' areas are gone: leave no empty root behind
                self.task_root.rmdir()

    def _watch_notices(self, loop: asyncio.AbstractEventLoop) -> GcpNoticeWatcher | None:
        """Start watching the metadata server for a notice when configured to (or when it is named)."""
        watch = self.config.watch_notices
        if watch is False or (watch is None and not metadata_server_configured()):
            return None

        def on_notice(notice: Notice) -> None:  # from the watcher's thread
            loop.call_soon_threadsafe(self.notice_arrived, notice)

        return GcpNoticeWatcher(on_notice).start()

    def notice_arrived(self, notice: Notice) -> None:
        """A preemption notice for this host: stop every running attempt (SIGTERM now, SIGKILL after the grace),
        each reported as preempted with the notice's reason, and take no new work (the first notice holds)."""
        if self.notice is not None:
            return
        self.notice = notice
        self.log.warning("preemption_notice_received", reason=notice.reason, running=len(self._handles))
        for key, handle in list(self._handles.items()):
            self._preempt(key, handle)
        self._spawn(self._cordon_self(notice.reason))

    def _preempt(self, key: tuple[str, int, int], handle: TaskHandle) -> None:
        assert self.notice is not None
        self._preempted[key] = self.notice.reason
        self._post_notice(key)
        grace = max(self.notice.window_seconds, self.config.notice_grace_seconds)
        self.log.info("task_preempting", job_id=key[0], task_index=key[1], attempt=key[2], grace_seconds=grace)
        self._spawn(self.runtime.kill(handle, grace))

    def _post_notice(self, key: tuple[str, int, int], evicted: str = "") -> None:
        """Make the attempt's IRIS_PREEMPTION_NOTICE_FILE appear (before its SIGTERM, so a handler sees it),
        holding the notice's reason, or `evicted: <why>` for an eviction."""
        path = self._notice_files.get(key)
        if path is None:
            return
        if self.notice is not None:
            text = self.notice.reason
        else:
            text = f"evicted: {evicted}" if evicted else "evicted for higher-band work"
        try:
            post_notice_file(path, text)
        except OSError as err:  # its area is going away: the SIGTERM still comes
            self.log.warning("notice_file_failed", path=str(path), error=str(err))

    def _spawn(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _cordon_self(self, reason: str) -> None:
        """Ask the scheduler to place nothing more here (the host is going); logged when it cannot be told."""
        try:
            await self.client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).signal(
                CORDON_WORKERS, {"worker_ids": [self.config.worker_id], "cordoned": True, "reason": reason}
            )
        except Exception as err:  # the notice's own work (the SIGTERMs) is done already
            self.log.warning("cordon_signal_failed", error=_describe(err))

    async def _serve(self, stop: asyncio.Event) -> None:
        """Poll and stay registered until `stop`, replacing Temporal workers that fail."""
        registered = False
        restarts = Backoff(first=WORKER_RESTART_SECONDS, cap=WORKER_RESTART_CAP_SECONDS)
        while not stop.is_set():
            sessions = self._worker(
                agent_session_queue(self.config.worker_id, self.instance), self.pacing.session_forward,
                self.worker_session,
            )  # fmt: skip
            tasks = self._worker(
                worker_task_queue(self.config.worker_id), self.pacing.task_forward,
                self.run_task, self.stop_task, *self.access.activities(),
            )  # fmt: skip
            running = [asyncio.create_task(sessions.run())]
            failed: str | None = None
            try:
                if not registered:
                    registered = await self._until_done(running, self.register(stop=stop))
                    if not registered:
                        return  # stopped while waiting for the control plane
                    restarts.reset()
                running.append(asyncio.create_task(tasks.run()))  # accepted: now take tasks
                failed = await self._supervise(running, stop)
            except RegistrationRefused:
                raise
            except Exception as err:  # a worker that stopped, or anything else: start again
                failed = _describe(err)
            finally:
                await self._stop_workers(zip((sessions, tasks), running, strict=False))  # tasks: once accepted
            if failed is not None and not stop.is_set():
                # Their shutdown ended the session activity too: the next workers start a new session.
                delay = restarts.next()
                self.log.error("temporal_worker_failed", error=failed, restart_in=round(delay, 2))
                self.session, registered = uuid.uuid4().hex, False
                await pause(delay, stop)

    def _worker(self, queue: str, forward_seconds: float, *work: Any) -> Worker:
        """A Temporal worker polling `queue` for the activities `work`; the SDK forwards their heartbeats at
        most every `forward_seconds`."""
        return Worker(
            self.client,
            task_queue=queue,
            activities=list(work),
            identity=f"{self.config.worker_id}/agent-{self.instance}@{socket.gethostname()}",
            build_id=UNVERSIONED_BUILD_ID,  # unversioned: not the SDK's digest of all loaded code (~60 ms a start)
            max_concurrent_activities=1000,
            graceful_shutdown_timeout=timedelta(0),
            max_heartbeat_throttle_interval=timedelta(seconds=forward_seconds),
            default_heartbeat_throttle_interval=timedelta(seconds=forward_seconds),
        )

    async def _stop_workers(self, pairs: Iterable[tuple[Worker, asyncio.Task[None]]]) -> None:
        """Shut down the started Temporal workers of `pairs` (worker, its run) together; wait for their runs.

        Their running tasks are killed (SIGTERM, the grace, SIGKILL) at once; reporting that to a
        Temporal that does not answer is given STOP_REPORT_SECONDS more, so a stop is prompt.
        """
        started = list(pairs)

        async def stop_all() -> None:
            await asyncio.gather(*(worker.shutdown() for worker, run in started if not run.done()))
            for _, run in started:
                with contextlib.suppress(BaseException):
                    await run

        stopping = asyncio.ensure_future(stop_all())
        # The shutdown cancels every running task's activity, which kills its process; that is
        # waited for in full. What the SDK does after (reporting to Temporal) gets a short while.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._no_activity.wait(), self.config.kill_grace_seconds + 5.0)
        done, _ = await asyncio.wait({stopping}, timeout=STOP_REPORT_SECONDS)
        if not done:
            stopping.cancel()
            self.log.warning("temporal_worker_shutdown_slow", waited_after_tasks=STOP_REPORT_SECONDS)

    @staticmethod
    async def _until_done(running: list[asyncio.Task[None]], work: Awaitable[_T]) -> _T:
        """`work`'s result unless a Temporal worker stops first (then raise its error)."""
        job = asyncio.ensure_future(work)
        done, _ = await asyncio.wait({job, *running}, return_when=asyncio.FIRST_COMPLETED)
        if job in done:
            return job.result()
        job.cancel()
        with contextlib.suppress(BaseException):
            await job
        for run in done:
            run.result()
        raise RuntimeError("the Temporal worker stopped")

    async def _supervise(self, running: list[asyncio.Task[None]], stop: asyncio.Event) -> str | None:
        """Keep the session alive until `stop`; a Temporal worker's error if one failed, else None."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            for run in running:
                if not run.done():
                    continue
                err = run.exception() if not run.cancelled() else None
                return f"{type(err).__name__}: {err}" if err else "stopped polling"
            silent = loop.time() - self._last_beat > SESSION_SILENCE_SECONDS
            if self._session_lost.is_set() or silent:
                old, self.session = self.session, uuid.uuid4().hex
                self.log.warning(
                    "worker_session_lost", old_session=old, new_session=self.session,
                    reason="session heartbeats stopped" if silent else "session ended",
                )
                self._session_lost.clear()
                await self._until_done(running, self.register(stop=stop))
                continue
            waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._session_lost.wait())]
            try:
                await asyncio.wait([*waits, *running], timeout=HEARTBEAT_SECONDS, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        return None

    # -- activities --------------------------------------------------------------------------

    @activity.defn(name=WORKER_SESSION)
    async def worker_session(self, session: WorkerSessionInput) -> None:
        """Heartbeat until cancelled; a session of an older agent start ends at once."""
        if session.session != self.session:
            raise ApplicationError("stale worker session", non_retryable=True)
        loop = asyncio.get_running_loop()
        try:
            while session.session == self.session:
                activity.heartbeat()
                self._last_beat = loop.time()
                await asyncio.sleep(self.pacing.session_beat)
            raise ApplicationError("replaced by a newer session", non_retryable=True)
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                raise ApplicationError("worker agent shut down", type=WORKER_SHUTDOWN) from None
            if session.session == self.session:
                # The server dropped the session (heartbeat timeout while paused or cut off,
                # workflow terminated): without a new one the scheduler never sees us again.
                details = activity.cancellation_details()
                self.log.warning("worker_session_cancelled", session=session.session, details=str(details))
                self._session_lost.set()
            raise

    @activity.defn(name=STOP_TASK)
    async def stop_task(self, inp: StopTask) -> bool:
        """SIGTERM a running attempt and SIGKILL it after the grace (an eviction); False when it does not run here.

        Its run_task sees the process end and reports the signal's exit as usual.
        """
        handle = self._handles.get((inp.job_id, inp.task_index, inp.attempt))
        if handle is None:
            return False
        key = (inp.job_id, inp.task_index, inp.attempt)
        if inp.kill:  # its job's kill: as its cancellation would, a heartbeat sooner
            self.log.info("task_killing", job_id=inp.job_id, task_index=inp.task_index, attempt=inp.attempt)
            self._killed.add(key)
            await self.runtime.kill(handle, self.config.kill_grace_seconds)
            return True
        self.log.info("task_stopping", job_id=inp.job_id, task_index=inp.task_index, attempt=inp.attempt,
                      grace_seconds=inp.grace_seconds)  # fmt: skip
        self._post_notice(key, inp.reason)  # an eviction is a notice too
        self._preempted.setdefault(key, f"evicted: {inp.reason}")  # whatever it exits with now, even 0
        await self.runtime.kill(handle, max(0.0, inp.grace_seconds))
        return True

    @activity.defn(name=RUN_TASK)
    async def run_task(self, inp: RunTaskInput) -> RunTaskResult:
        """Run one attempt; a non-zero exit is a result, an agent fault is an ApplicationError."""
        self._activities += 1
        self._no_activity.clear()
        try:
            return await self._run_task(inp)
        finally:
            self._ran.pop((inp.job_id, inp.task_index, inp.attempt), None)
            self._activities -= 1
            if not self._activities:
                self._no_activity.set()

    async def _run_task(self, inp: RunTaskInput) -> RunTaskResult:
        tlog = self.log.bind(job_id=inp.job_id, task_index=inp.task_index, attempt=inp.attempt)
        if inp.worker_id != self.config.worker_id:
            raise ApplicationError(f"task for worker {inp.worker_id} reached {self.config.worker_id}")
        fenced = isinstance(self.runtime, LeasedRuntime) and self.runtime.leases
        lease = AttemptLease(self.client, self.config.lease, fenced=fenced)
        return await run_leased(lease, self._run_leased(inp, lease, tlog))

    async def _run_leased(self, inp: RunTaskInput, lease: AttemptLease, tlog: Any) -> RunTaskResult:
        late = _delivered_late()
        if late is not None:
            # The server handed the task to a poll this agent made before it was paused or cut
            # off; the attempt has timed out there and been retried elsewhere. Running it now
            # would run the task twice, so refuse it the way a shutdown would (a preemption).
            tlog.warning("stale_task_refused", seconds_since_dispatch=round(late, 1))
            raise ApplicationError(
                f"task reached worker {self.config.worker_id} {late:.0f} s after dispatch "
                "(agent paused or cut off); not started",
                type=WORKER_SHUTDOWN,
            )
        if self.notice is not None:  # the host is going: this attempt runs elsewhere, as a preemption
            tlog.info("task_refused_after_notice", reason=self.notice.reason)
            return RunTaskResult(exit_code=-1, error=f"not started: {self.notice.reason}", started=False,
                                 preempted=self.notice.reason)  # fmt: skip
        try:
            inp = await self.launches.resolve(inp)
        except LaunchUnreadableError as err:
            return RunTaskResult(exit_code=-1, error=str(err), started=False)
        env = {
            **distributed_env(inp),
            **inp.env,
            **self.config.cluster_env,
            "IRIS_JOB_ID": inp.job_id,
            "IRIS_TASK_ID": f"{inp.job_id}/task-{inp.task_index}",
            "IRIS_TASK_INDEX": str(inp.task_index),
            "IRIS_NUM_TASKS": str(inp.num_tasks),
            "IRIS_ATTEMPT": str(inp.attempt),
            "IRIS_WORKER_ID": self.config.worker_id,
            "IRIS_NAMESPACE": inp.namespace,
            "IRIS_PARENT_JOB_ID": parent_job_of(inp.job_id),
        }
        if inp.reservation_id:
            env[RESERVATION_ENV] = inp.reservation_id
        area = TaskArea.at(self.task_root, inp.job_id, inp.task_index, inp.attempt)
        key = (inp.job_id, inp.task_index, inp.attempt)
        self._notice_files[key] = area.path / NOTICE_FILE_NAME
        env[NOTICE_FILE_ENV] = str(self._notice_files[key])
        checkpoints = ""
        if inp.env.get(CHECKPOINT_DIR_ENV):  # the job's root: this task's own directory under it
            checkpoints = env[CHECKPOINT_DIR_ENV] = task_checkpoint_dir(inp.env[CHECKPOINT_DIR_ENV], inp.task_index)
        try:
            step = "cannot prepare the task's directory"
            await asyncio.to_thread(area.create)
            if inp.function_blob:
                step = "task function blob is missing"
                await asyncio.to_thread(area.stage_function, self.blobs, inp.function_blob)
            bundle = None
            if inp.bundle_blob:
                step = "cannot fetch the job's code bundle"
                bundle = await self.bundles.prepare(inp.job_id, inp.bundle_blob)
                env["PYTHONPATH"] = os.pathsep.join(p for p in (str(bundle), inp.env.get("PYTHONPATH", "")) if p)
            if checkpoints and is_local(checkpoints):
                step = "cannot make the task's checkpoint directory"
                await asyncio.to_thread(make_local, checkpoints)
            if self.config.task_api:  # team mode: the task holds its job's token for the API, nothing for Temporal
                step = "cannot give the task its token"
                env[TOKEN_FILE_ENV] = str(await asyncio.to_thread(self._task_tokens.write, area.path, inp.job_id))
            step = "cannot open the task's log"
            writer = self.logs.open_writer(inp.job_id, inp.task_index, inp.attempt)
        except (StorageError, OSError, zipfile.BadZipFile) as err:
            self._notice_files.pop(key, None)
            await asyncio.to_thread(area.remove)
            if step == "task function blob is missing" and not isinstance(err, BlobNotFoundError):
                step = "cannot read the task function blob"
            return RunTaskResult(exit_code=-1, error=f"{step}: {err}", started=False)
        argv = inp.argv or task_runner_argv(area.store_url, inp.function_blob, inp.result_blob, self.runtime.python)
        try:
            with writer:
                mounts = [Mount(str(area.path), read_only=False)]
                if bundle is not None:
                    mounts.append(Mount(str(bundle), read_only=False))
                if checkpoints and is_local(checkpoints):
                    mounts.append(Mount(checkpoints, read_only=False))
                if self.runtime.name != RuntimeName.PROCESS:
                    mounts.extend(Mount(path) for path in self.config.cluster_files)
                spec = TaskSpec(
                    argv=argv, log=writer, env=env, cwd=str(bundle or area.work_dir),
                    image=inp.image or self.config.default_image or None,
                    job_id=inp.job_id, task_index=inp.task_index, attempt=inp.attempt,
                    worker_id=self.config.worker_id, cpu_millis=inp.cpu_millis, memory_bytes=inp.memory_bytes,
                    mounts=mounts, runner_code=await self._runner_code(),
                )  # fmt: skip
                ended = await self._set_up(spec, inp, bundle, lease, tlog) if inp.setup and bundle else None
                usage = TaskUsage()
                if ended is None:
                    ended = await self._run(spec, inp, lease, tlog, usage)
            if isinstance(ended, RunTaskResult):  # its setup failed (or was stopped by a notice)
                return replace(ended, preempted=self._preempted.get(key, ""))
            returned = not inp.result_blob or await asyncio.to_thread(area.publish_outputs, self.blobs, inp.result_blob)
        finally:
            self._notice_files.pop(key, None)
            preempted = self._preempted.pop(key, "")
            killed = key in self._killed
            self._killed.discard(key)
            await asyncio.to_thread(area.remove)
        exit_code = ended.exit_code
        tlog.info("task_exited", exit_code=exit_code, reason=ended.reason or None,
                  peak_memory_bytes=usage.peak_memory_bytes, cpu_seconds=round(usage.cpu_seconds, 3))  # fmt: skip
        released = await self._release(inp)
        if exit_code == 0 and killed:  # it exited 0 on its SIGTERM: stopped by the kill, not a success
            result = RunTaskResult(exit_code=0, error="killed (it exited 0 when stopped)", released=released)
        elif exit_code == 0 and not returned:  # the callable's process ended before it returned (os._exit(0))
            gone = "the task's process exited 0 before its function returned (os._exit?): no result"
            result = RunTaskResult(exit_code=0, error=gone, released=released)
        elif exit_code == 0:
            result = RunTaskResult(exit_code=0, result_blob=inp.result_blob, released=released)
        else:
            error = read_task_error(self.blobs, inp.result_blob) if inp.result_blob else None
            if error is None:
                signalled = f"killed by signal {-exit_code}"
                error = ended.reason or (f"exit code {exit_code}" if exit_code > 0 else signalled)
            result = RunTaskResult(exit_code=exit_code, error=error, released=released)
        return replace(result, peak_memory_bytes=usage.peak_memory_bytes, cpu_seconds=usage.cpu_seconds,
                       run_seconds=usage.run_seconds, preempted=preempted)  # fmt: skip

    async def _set_up(
        self, spec: TaskSpec, inp: RunTaskInput, bundle: Path, lease: AttemptLease, tlog: Any
    ) -> TaskExit | RunTaskResult | None:
        """Run the job's setup commands once per job on this host, through the task's runtime.

        None when the setup is (or was already) done; otherwise how it failed, as the attempt's result.
        """
        async with self.bundles.lock(inp.job_id):
            if self.bundles.is_set_up(bundle):
                return None
            script = " && ".join(f"({cmd})" for cmd in inp.setup)
            tlog.info("job_setup_started", commands=len(inp.setup))
            ended = await self._run(replace(spec, argv=["/bin/sh", "-c", script]), inp, lease, tlog)
            if isinstance(ended, TaskExit) and ended.exit_code == 0:
                self.bundles.mark_set_up(bundle)
                return None
        if isinstance(ended, TaskExit):
            code = ended.exit_code
            why = ended.reason or (f"exit code {code}" if code > 0 else f"killed by signal {-code}")
            return RunTaskResult(exit_code=code or -1, error=f"the job's setup failed ({why}): {script[:200]}")
        return ended

    async def _runner_code(self) -> str | None:
        """For container runtimes, the task runner's code staged under the task root (once)."""
        if self.runtime.name == RuntimeName.PROCESS:
            return None
        if self._staged_runner is None:
            self._staged_runner = str(await asyncio.to_thread(stage_runner_code, self.task_root))
        return self._staged_runner

    async def _run(
        self, spec: TaskSpec, inp: RunTaskInput, lease: AttemptLease, tlog: Any, usage: TaskUsage | None = None
    ) -> TaskExit | RunTaskResult:
        """Start the task under its lease, wait while the lease beats, kill it if the attempt is cancelled.

        The task starts only once Temporal has recorded a heartbeat of the attempt, with the lease
        that heartbeat renewed: a task never runs on a lease the server could not have seen. A task
        that cannot start is a result (the attempt's failure), not an exception. With `usage`, the
        task's resource use is sampled into it while it runs.
        """
        spec = replace(spec, lease_deadline=await lease.fresh() if lease.fenced else 0.0)
        # Charged for how long the runtime saw its process run (`TaskExit.ran_seconds`); from here when the
        # runtime cannot tell: the process may run before `start` returns.
        began = time.monotonic()
        try:
            handle = await self.runtime.start(spec)
        except (TaskStartError, ValueError) as err:
            tlog.warning("task_start_failed", error=str(err))
            return RunTaskResult(exit_code=-1, error=str(err), started=False)
        tlog.info("task_started", handle=handle, runtime=str(self.runtime.name))
        started = asyncio.create_task(self._tell_started(inp))
        self._running[(inp.job_id, inp.task_index)] = (handle, inp.attempt, spec)
        key = (inp.job_id, inp.task_index, inp.attempt)
        self._handles[key] = handle
        runtime = self.runtime
        if isinstance(runtime, LeasedRuntime):
            lease.renew = lambda deadline: runtime.renew(handle, deadline)
        if self.notice is not None:  # the notice came while it was starting
            self._preempt(key, handle)
        try:
            async with sampling(self.runtime, handle, usage or TaskUsage()) as sampled:
                lease.progress = lambda: [PROCESS_STARTED, sampled.detail()]
                lease.poke()
                ended = await self.runtime.wait(handle)
                if ended.fenced:
                    # Its agent stopped renewing the lease (cut off from Temporal, or frozen past it):
                    # the attempt is lost to the worker, not the task's fault.
                    tlog.warning("task_lease_expired", exit_code=ended.exit_code)
                    raise ApplicationError(LEASE_EXPIRED_REASON, type=LEASE_EXPIRED)
                if ended.usage is not None:  # the runtime's account at the end: what sampling missed last
                    sampled.add(ended.usage.memory_bytes, ended.usage.cpu_seconds)
                # What the attempt is charged for (resource-time), sent with its release.
                self._ran[key] = ended.charged_seconds(began)
                return ended
        except asyncio.CancelledError:
            ended = await self.runtime.kill(handle, self.config.kill_grace_seconds)
            tlog.info("task_killed", exit_code=ended.exit_code)
            details = activity.cancellation_details()
            gone = (details is not None and details.not_found) or lease.ended == Beat.GONE
            if gone:
                # The attempt's workflow is gone (terminated from outside): it will never give
                # the place back, so the agent does, or the scheduler books it forever.
                await self._release(inp)
            if activity.is_worker_shutdown():
                raise ApplicationError("worker agent shut down", type=WORKER_SHUTDOWN) from None
            if gone or (details is not None and details.timed_out):
                raise
            self._killed.add(key)
            # Stopped at its workflow's word (a kill, an eviction): the attempt ends with a result, which
            # the workflow waits for (WAIT_CANCELLATION_COMPLETED), so what it used is reported, as for
            # any other end (a cancellation carries no result).
            self._ran[key] = ended.charged_seconds(began)
            return replace(ended, reason=ended.reason or "killed")
        except Exception:
            # Whatever went wrong here, the attempt's process must not outlive its run_task: the task
            # workflow may start the task elsewhere as soon as this reports.
            await self.runtime.kill(handle, self.config.kill_grace_seconds)
            raise
        finally:
            lease.renew = lambda deadline: None
            lease.progress = lambda: [PROCESS_STARTED]
            if self._handles.get(key) is handle:
                del self._handles[key]
            started.cancel()
            if self._running.get((inp.job_id, inp.task_index), (None,))[0] == handle:
                del self._running[(inp.job_id, inp.task_index)]

    async def _release(self, inp: RunTaskInput) -> bool:
        """Give the task's capacity back to the scheduler now that its process is gone.

        Done here rather than by the task workflow because a workflow's last
        signal costs it a whole workflow task; on failure the workflow releases.
        """
        try:
            ran = self._ran.pop((inp.job_id, inp.task_index, inp.attempt), -1.0)
            await self._releases.send(Release(inp.job_id, inp.task_index, inp.attempt, ran_seconds=ran))
            return True
        except Exception as err:  # Temporal unreachable, whatever the class: the workflow releases
            self.log.warning("release_signal_failed", job_id=inp.job_id, error=_describe(err))
            return False

    async def _tell_started(self, inp: RunTaskInput) -> None:
        """Tell the job its task runs; off the task's path, failures only logged."""
        if not inp.job_workflow_id:
            return
        try:
            await self.client.get_workflow_handle(inp.job_workflow_id).signal(
                "task_started",
                TaskStarted(inp.task_index, inp.attempt, self.config.worker_id, endpoints(inp.network)),
            )
        except Exception as err:  # off the task's path: the job learns it from the result
            self.log.warning("task_started_signal_failed", job_id=inp.job_id, error=_describe(err))


def _delivered_late() -> float | None:
    """Seconds since the server started this activity, if more than its heartbeat timeout (else None): past
    that, the server has timed the attempt out already, and nothing this agent does counts."""
    info = activity.info()
    timeout = info.heartbeat_timeout
    if not timeout or info.started_time is None:
        return None
    age = (datetime.now(UTC) - info.started_time).total_seconds()
    return age if age > timeout.total_seconds() else None


def default_task_dir(state_dir: Path | None) -> Path:
    """Beside the state directory, or in the temp dir for an agent without one."""
    if state_dir is not None:
        return state_dir.parent / "tasks"
    return Path(tempfile.gettempdir()) / f"iris-tasks-{os.getuid()}"


def default_state_dir(worker_id: str) -> Path:
    """The agent's record of its running task groups, under IRIS_HOME (where `iris cluster down` reads it)."""
    return iris_home() / "agents" / worker_id.replace("/", "_") / "running"


