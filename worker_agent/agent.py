"""The worker agent: the daemon on one worker host.

It registers the host with the scheduler (an update, so a refusal comes back
with its reason), starts its WorkerWorkflow, and polls its own task queue for
two activities: `worker_session` (liveness, heartbeats only) and `run_task`
(one attempt of one task through a ContainerRuntime, heartbeating while it
runs and killing the process group when cancelled).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import structlog
from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.contracts import (
    RUN_TASK,
    WORKER_SESSION,
    RunTaskInput,
    RunTaskResult,
    TaskStarted,
    WorkerSessionInput,
)
from scheduler.proto import cluster_pb2 as pb
from scheduler.proto.values import set_attr
from worker_agent.runtime import ContainerRuntime, ProcessRuntime, TaskSpec, TaskStartError
from worker_agent.storage import BlobStore, LogStore, StorageError
from worker_agent.task_runner import read_task_error, task_runner_argv
from workflows.ids import CONTROL_TASK_QUEUE, SCHEDULER_WORKFLOW_ID, worker_task_queue, worker_workflow_id

log = structlog.get_logger("iris.agent")

HEARTBEAT_SECONDS = 1.0
KILL_GRACE_SECONDS = 5.0
WORKER_SHUTDOWN = "WorkerShutdown"  # workflows.task_workflow.WORKER_SHUTDOWN
WORKER_WORKFLOW = "WorkerWorkflow"  # started by name: the agent does not import workflow code


class RegistrationRefused(Exception):
    """The scheduler refused this worker's metadata; the message says why."""


@dataclass
class AgentConfig:
    worker_id: str
    store_url: str
    cpu_millis: int
    memory_bytes: int
    gpus: int = 0
    tpus: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    runtime: str = "process"
    state_dir: Path | None = None  # where running task process groups are recorded


def metadata(config: AgentConfig, session: str) -> pb.WorkerMetadata:
    meta = pb.WorkerMetadata(
        worker_id=config.worker_id, runtime=config.runtime, host=socket.gethostname(), agent_session=session
    )
    meta.capacity.cpu_millis = config.cpu_millis
    meta.capacity.memory_bytes = config.memory_bytes
    meta.capacity.gpus = config.gpus
    meta.capacity.tpus = config.tpus
    for key, value in config.attributes.items():
        set_attr(meta.attributes[key], value)
    return meta


class ProcessGroupLedger:
    """Records the process groups of running tasks on disk.

    If the agent is SIGKILLed its tasks live on in their own sessions; the next
    agent start with the same state directory kills them, so a task never runs
    twice on one host after a restart.
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def add(self, pgid: int) -> None:
        if self.directory is not None:
            (self.directory / str(pgid)).touch()

    def remove(self, pgid: int) -> None:
        if self.directory is not None:
            (self.directory / str(pgid)).unlink(missing_ok=True)

    def kill_leftovers(self) -> list[int]:
        killed: list[int] = []
        if self.directory is None:
            return killed
        for entry in self.directory.iterdir():
            if entry.name.isdigit():
                try:
                    os.killpg(int(entry.name), signal.SIGKILL)
                    killed.append(int(entry.name))
                except (ProcessLookupError, PermissionError):
                    pass
            entry.unlink(missing_ok=True)
        return killed


class WorkerAgent:
    def __init__(self, client: Client, config: AgentConfig, runtime: ContainerRuntime | None = None) -> None:
        self.client = client
        self.config = config
        self.runtime = runtime or ProcessRuntime()
        self.session = uuid.uuid4().hex
        self.blobs = BlobStore.from_url(config.store_url)
        self.logs = LogStore.from_url(config.store_url.rstrip("/") + "/logs")
        self.ledger = ProcessGroupLedger(config.state_dir)
        self.log = log.bind(worker_id=config.worker_id)

    # -- lifecycle -------------------------------------------------------------------------

    async def register(self, timeout: float = 120.0) -> None:
        """Register with the scheduler, waiting for the control plane to come up."""
        handle = self.client.get_workflow_handle(SCHEDULER_WORKFLOW_ID)
        meta = metadata(self.config, self.session)
        deadline = asyncio.get_running_loop().time() + timeout
        delay = 0.2
        while True:
            try:
                await handle.execute_update("register_worker", meta)
                break
            except WorkflowUpdateFailedError as err:
                cause = err.cause
                raise RegistrationRefused(getattr(cause, "message", str(cause))) from err
            except RPCError as err:
                if asyncio.get_running_loop().time() > deadline:
                    raise RuntimeError(f"could not reach the Iris scheduler: {err}") from err
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        await self.client.start_workflow(
            WORKER_WORKFLOW,
            WorkerSessionInput(self.config.worker_id, self.session),
            id=worker_workflow_id(self.config.worker_id),
            task_queue=CONTROL_TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
            static_summary=f"worker {self.config.worker_id}",
        )
        self.log.info("worker_registered", session=self.session, attributes=self.config.attributes)

    async def serve(self) -> None:
        """Run until SIGTERM/SIGINT; running tasks are killed and reported as preempted."""
        killed = self.ledger.kill_leftovers()
        if killed:
            self.log.warning("killed_leftover_tasks", process_groups=killed)
        worker = Worker(
            self.client,
            task_queue=worker_task_queue(self.config.worker_id),
            activities=[self.run_task, self.worker_session],
            max_concurrent_activities=1000,
            graceful_shutdown_timeout=timedelta(0),
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with worker:
            await self.register()
            await stop.wait()
            self.log.info("worker_stopping")

    # -- activities --------------------------------------------------------------------------

    @activity.defn(name=WORKER_SESSION)
    async def worker_session(self, session: WorkerSessionInput) -> None:
        """Heartbeat until cancelled; a session of an older agent start ends at once."""
        if session.session != self.session:
            raise ApplicationError("stale worker session", non_retryable=True)
        try:
            while True:
                activity.heartbeat()
                await asyncio.sleep(HEARTBEAT_SECONDS)
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                raise ApplicationError("worker agent shut down", type=WORKER_SHUTDOWN) from None
            raise

    @activity.defn(name=RUN_TASK)
    async def run_task(self, inp: RunTaskInput) -> RunTaskResult:
        """Run one attempt; a non-zero exit is a result, an agent fault is an ApplicationError."""
        tlog = self.log.bind(job_id=inp.job_id, task_index=inp.task_index, attempt=inp.attempt)
        if inp.worker_id != self.config.worker_id:
            raise ApplicationError(f"task for worker {inp.worker_id} reached {self.config.worker_id}")
        argv = inp.argv or task_runner_argv(self.blobs.url, inp.function_blob, inp.result_blob)
        env = {
            **inp.env,
            "IRIS_JOB_ID": inp.job_id,
            "IRIS_TASK_ID": f"{inp.job_id}/task-{inp.task_index}",
            "IRIS_TASK_INDEX": str(inp.task_index),
            "IRIS_NUM_TASKS": str(inp.num_tasks),
            "IRIS_ATTEMPT": str(inp.attempt),
            "IRIS_WORKER_ID": self.config.worker_id,
        }
        try:
            writer = self.logs.open_writer(inp.job_id, inp.task_index, inp.attempt)
        except StorageError as err:
            return RunTaskResult(exit_code=-1, error=f"cannot open the task's log: {err}")
        with writer:
            try:
                running = await self.runtime.start(
                    TaskSpec(argv=argv, log=writer, env=env, image=inp.image or None)
                )
            except (TaskStartError, ValueError) as err:
                tlog.warning("task_start_failed", error=str(err))
                return RunTaskResult(exit_code=-1, error=str(err))
            self.ledger.add(running.pid)
            tlog.info("task_started", pid=running.pid)
            started = asyncio.create_task(self._tell_started(inp))
            try:
                exit_code = await self._wait_heartbeating(running)
            except asyncio.CancelledError:
                exit_code = await running.kill(KILL_GRACE_SECONDS)
                tlog.info("task_killed", exit_code=exit_code)
                if activity.is_worker_shutdown():
                    raise ApplicationError("worker agent shut down", type=WORKER_SHUTDOWN) from None
                raise
            finally:
                self.ledger.remove(running.pid)
                started.cancel()
        tlog.info("task_exited", exit_code=exit_code)
        if exit_code == 0:
            return RunTaskResult(exit_code=0, result_blob=inp.result_blob)
        error = read_task_error(self.blobs, inp.result_blob) if inp.result_blob else None
        if error is None:
            error = f"exit code {exit_code}" if exit_code > 0 else f"killed by signal {-exit_code}"
        return RunTaskResult(exit_code=exit_code, error=error)

    async def _wait_heartbeating(self, running: Any) -> int:
        waiter = asyncio.ensure_future(running.wait())
        try:
            while True:
                activity.heartbeat()
                done, _ = await asyncio.wait({waiter}, timeout=HEARTBEAT_SECONDS)
                if done:
                    return int(waiter.result())
        finally:
            if not waiter.done():
                waiter.cancel()

    async def _tell_started(self, inp: RunTaskInput) -> None:
        """Tell the job its task runs; off the task's path, failures only logged."""
        if not inp.job_workflow_id:
            return
        try:
            await self.client.get_workflow_handle(inp.job_workflow_id).signal(
                "task_started", TaskStarted(inp.task_index, inp.attempt, self.config.worker_id)
            )
        except RPCError as err:
            self.log.warning("task_started_signal_failed", job_id=inp.job_id, error=str(err))


def default_state_dir(worker_id: str) -> Path:
    home = Path(os.environ.get("IRIS_HOME", Path.home() / ".iris"))
    return home / "agents" / worker_id.replace("/", "_") / "running"


