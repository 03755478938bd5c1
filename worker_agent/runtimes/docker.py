"""The Docker runtime: each task attempt is a container, through the Docker Engine API (docker SDK).

Choices, and why:

- Host networking: multi-host collectives (JAX, NCCL) reach peers by host address and port, and
  a worker may run with Docker's bridge switched off altogether.
- Limits from the job's request: ``cpu`` as CPU quota (nano-CPUs), ``memory`` as a hard limit
  with no extra swap. A task that goes past its memory is OOM-killed by the kernel; the exit says
  so (``TaskExit.oom_killed`` and a one-line reason) rather than a bare 137.
- Only the task's own paths are mounted (``spec.mounts``, at the same path), plus the task
  runner's code read-only (``base.runner_code_mounts``); accelerator device nodes of the host
  (``/dev/accel*`` for TPUs, ``/dev/nvidia*`` for GPUs) are passed through when present.
- An init (``docker run --init``) is PID 1, so a SIGTERM reaches the task (a bare PID 1 ignores
  it) and orphans are reaped.
- Labels ``iris-job-id``, ``iris-task-id``, ``iris-attempt``, ``iris-worker-id`` on every
  container: ``recover`` force-removes whatever this worker's earlier agent left, and a container
  is force-removed after it exits or is killed, so ``docker ps -a`` shows only running tasks.

The SDK is synchronous: its calls run on a private thread pool (a long ``wait`` per running task
would starve asyncio's small default pool), and logs are pumped by one thread per task into the
log store as the container writes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import secrets
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import docker
import structlog
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from worker_agent.runtimes import kernel_oom
from worker_agent.runtimes.base import (
    LABEL_JOB_ID,
    LABEL_TASK_ID,
    LABEL_WORKER_ID,
    FinishedTasks,
    RecoveredTask,
    RuntimeName,
    TaskExit,
    TaskHandle,
    TaskSpec,
    TaskStartError,
    TaskStats,
    container_environment,
    oom_reason,
    runner_code_mounts,
    signal_exit_code,
)
from worker_agent.runtimes.container_leases import ContainerLeases
from worker_agent.runtimes.containers import ContainerRuntime, RunningContainer

__all__ = ["DockerRuntime", "accelerator_devices"]

logger = structlog.get_logger(__name__)

_T = TypeVar("_T")
_API_TIMEOUT_SECONDS: Final = 60
_LOG_DRAIN_SECONDS: Final = 10.0
_CATCH_UP_MAX_BYTES: Final = 16 << 20  # the most output of a task that its end reads again (`_catch_up_logs`)
_OOM_EVENT_WAIT_SECONDS: Final = 1.0  # how long a SIGKILLed container's late ``oom`` event is waited for
_POOL_SIZE: Final = 256
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")
_ACCELERATOR_GLOBS: Final = ("accel*", "vfio/*", "nvidia[0-9]*", "nvidiactl", "nvidia-uvm*")  # under /dev


def accelerator_devices() -> list[str]:
    """Device nodes of the host's accelerators (TPU chips, GPUs), passed through to task containers."""
    dev = Path("/dev")
    return sorted({str(path) for pattern in _ACCELERATOR_GLOBS for path in dev.glob(pattern)})


def container_name(spec: TaskSpec) -> str:
    """A readable, unique container name: ``iris-<job>-<index>-a<attempt>-<random>``."""
    job = _NAME_UNSAFE.sub("-", spec.job_id).strip("-.")[:60] or "job"
    return f"iris-{job}-{spec.task_index}-a{spec.attempt}-{secrets.token_hex(3)}"


@dataclass(kw_only=True)
class _Running(RunningContainer):
    spec: TaskSpec
    logged: list[int] = field(default_factory=lambda: [0])  # bytes of output the pump wrote (set by its thread)


class DockerRuntime(ContainerRuntime[_Running]):
    """Runs each task attempt as a container of the job's image on one Docker Engine.

    ``docker_host`` is the engine's URL (``unix:///var/run/docker.sock`` style); None takes
    the ``DOCKER_HOST`` environment as the docker CLI does. The handle is the container id.
    """

    def __init__(
        self,
        *,
        worker_id: str,
        docker_host: str | None = None,
        python: str = "python3",
        pass_devices: bool = True,
        lease_seconds: float | None = None,
        ledger_dir: Path | None = None,
    ) -> None:
        try:
            # Each running task holds two long requests (its wait and its log stream): a pool sized
            # for many tasks keeps connections from being opened and dropped for every call.
            if docker_host:
                self._client = docker.APIClient(
                    base_url=docker_host, timeout=_API_TIMEOUT_SECONDS, max_pool_size=_POOL_SIZE
                )
            else:
                self._client = docker.from_env(timeout=_API_TIMEOUT_SECONDS, max_pool_size=_POOL_SIZE).api
        except DockerException as exc:
            raise ValueError(f"cannot reach the Docker engine at {docker_host or 'DOCKER_HOST'}: {exc}") from exc
        self._worker_id = worker_id
        self._python = python
        self._devices = accelerator_devices() if pass_devices else []
        self._pool = ThreadPoolExecutor(max_workers=_POOL_SIZE, thread_name_prefix="iris-docker")
        self._running: dict[TaskHandle, _Running] = {}
        self._finished = FinishedTasks()
        # With a lease, the lease watchdog kills a container whose agent stopped renewing it (container_leases).
        self._leases = ContainerLeases(lease_seconds, ledger_dir) if lease_seconds is not None else None

    @property
    def name(self) -> RuntimeName:
        """Always ``docker``."""
        return RuntimeName.DOCKER

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    async def ping(self) -> None:
        """Raise ValueError with a readable reason if the engine does not answer."""
        try:
            await self._call(self._client.ping)
        except (DockerException, OSError) as exc:
            raise ValueError(f"the Docker engine does not answer: {exc}") from exc

    async def start(self, spec: TaskSpec) -> TaskHandle:
        """Create and start the container; TaskStartError (image missing, bad command, ...) if it cannot."""
        if not spec.image:
            raise TaskStartError(
                "cannot start task: the docker runtime needs an image (the job's image= / --image, "
                "or the worker's --default-image)"
            )
        await self._ensure_image(spec.image)
        binds = [f"{m.path}:{m.path}:{'ro' if m.read_only else 'rw'}" for m in spec.mounts]
        binds += [f"{host}:{inside}:ro" for host, inside in runner_code_mounts(spec.runner_code)]
        host_config = self._client.create_host_config(
            binds=binds,
            network_mode="host",
            init=True,
            mem_limit=spec.memory_bytes or None,
            memswap_limit=spec.memory_bytes or None,
            nano_cpus=spec.cpu_millis * 1_000_000 or None,
            devices=[f"{d}:{d}:rwm" for d in self._devices] or None,
        )
        try:
            created = await self._call(
                self._client.create_container,
                spec.image,
                command=list(spec.argv),
                environment=container_environment(spec.env),
                working_dir=spec.cwd,
                labels={**spec.labels(), LABEL_WORKER_ID: self._worker_id},
                host_config=host_config,
                name=container_name(spec),
                stdin_open=False,
                tty=False,
            )
            container_id = created["Id"]
        except (APIError, DockerException) as exc:
            raise TaskStartError(f"cannot start task in image {spec.image!r}: {_explain(exc)}") from exc
        try:
            await self._call(self._client.start, container_id)
        except (APIError, DockerException) as exc:
            await self._remove(container_id)
            reason = _explain(exc)
            raise TaskStartError(f"cannot start task {spec.argv[0]!r} in image {spec.image!r}: {reason}") from exc
        handle = TaskHandle(container_id)
        logged = [0]
        pump = threading.Thread(target=self._pump_logs, args=(container_id, spec, logged),
                                name=f"iris-docker-logs-{container_id[:12]}", daemon=True)  # fmt: skip
        pump.start()
        self._running[handle] = _Running(container_id=container_id, memory_bytes=spec.memory_bytes, log_pump=pump,
                                         spec=spec, logged=logged)  # fmt: skip
        if self._leases is not None and spec.lease_deadline:
            with contextlib.suppress(APIError, DockerException, KeyError, TypeError):
                pid = int((await self._call(self._client.inspect_container, container_id))["State"]["Pid"])
                self._leases.add(handle, pid, spec.lease_deadline)
        logger.debug("container started", container=container_id[:12], image=spec.image, task_id=spec.task_id)
        return handle

    async def _stop(self, running: _Running, grace_seconds: float) -> None:
        """``docker stop`` (SIGTERM, SIGKILL after the grace); a container that will not stop is killed."""
        try:
            await self._call(self._client.stop, running.container_id, timeout=math.ceil(grace_seconds))
        except NotFound:
            pass
        except (APIError, DockerException) as exc:
            logger.warning("container stop failed; killing it", container=running.container_id[:12], error=str(exc))
            with contextlib.suppress(APIError, DockerException):
                await self._call(self._client.kill, running.container_id)

    async def stats(self, handle: TaskHandle) -> TaskStats | None:
        """Memory in use and CPU time so far, from one stats sample of the engine."""
        running = self._running.get(handle)
        if running is None:
            return None
        try:
            sample = await self._call(self._client.stats, running.container_id, stream=False)
        except (APIError, DockerException):
            return None
        memory = int(sample.get("memory_stats", {}).get("usage", 0))
        cpu_ns = int(sample.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage", 0))
        return TaskStats(memory_bytes=memory, cpu_seconds=cpu_ns / 1e9)

    async def recover(self) -> list[RecoveredTask]:
        """Force-remove every container labelled with this worker id (an earlier agent's tasks)."""
        found = await self._call(
            self._client.containers, all=True, filters={"label": f"{LABEL_WORKER_ID}={self._worker_id}"}
        )
        recovered = []
        for container in found:
            if TaskHandle(container["Id"]) in self._running:
                continue  # started by this agent: not a leftover
            labels = container.get("Labels") or {}
            await self._remove(container["Id"])
            recovered.append(
                RecoveredTask(
                    TaskHandle(container["Id"]), labels.get(LABEL_JOB_ID, ""), labels.get(LABEL_TASK_ID, ""), "killed"
                )
            )
        return recovered

    async def listed(self) -> list[TaskHandle]:
        """Ids of the containers the engine lists for this worker (running or not)."""
        found = await self._call(
            self._client.containers, all=True, filters={"label": f"{LABEL_WORKER_ID}={self._worker_id}"}
        )
        return [TaskHandle(c["Id"]) for c in found]

    async def close(self) -> None:
        """Close the engine connection and the thread pool; running containers are left alone."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()
        if self._leases is not None:
            self._leases.close()

    # -- internals ---------------------------------------------------------------------------

    async def _ensure_image(self, image: str) -> None:
        """The image is present locally, or pulled; TaskStartError naming it otherwise."""
        try:
            await self._call(self._client.inspect_image, image)
            return
        except ImageNotFound:
            pass
        except (APIError, DockerException) as exc:
            raise TaskStartError(f"cannot start task: image {image!r}: {_explain(exc)}") from exc
        try:
            await self._call(self._client.pull, image)
        except (APIError, DockerException) as exc:
            raise TaskStartError(
                f"cannot start task: image {image!r} is not on this worker and could not be pulled ({_explain(exc)})"
            ) from exc

    def _pump_logs(self, container_id: str, spec: TaskSpec, logged: list[int]) -> None:
        """Copy the container's output into the task's log until the container ends (a thread)."""
        try:
            for chunk in self._client.logs(container_id, stdout=True, stderr=True, stream=True, follow=True):
                spec.log.write(chunk)
                logged[0] += len(chunk)
        except (APIError, DockerException, OSError, ValueError) as exc:
            logger.warning("container log stream ended early", container=container_id[:12], error=str(exc))

    def _catch_up_logs(self, running: _Running) -> None:
        """Write the output the follow stream missed. It can close as the container ends, before the engine
        has handed it the last lines (a task's final error line went missing so); the whole log, read once
        the container is gone, has them, in the order the stream gave the rest."""
        try:
            whole = self._client.logs(running.container_id, stdout=True, stderr=True, stream=False)
        except (APIError, DockerException, OSError, ValueError) as exc:
            logger.warning("container log could not be read again", container=running.container_id[:12],
                           error=str(exc))  # fmt: skip
            return
        if len(whole) > running.logged[0]:
            running.spec.log.write(whole[running.logged[0] :])

    async def _collect(self, running: _Running) -> TaskExit:
        try:
            status = await self._call(self._client.wait, running.container_id)
            code = int(status.get("StatusCode", -1))
        except NotFound:
            code = -1
        await asyncio.get_running_loop().run_in_executor(self._pool, running.log_pump.join, _LOG_DRAIN_SECONDS)
        # A pump still running writes the rest itself; a task that wrote more than a catch-up reads again may
        # lose its last lines to the race `_catch_up_logs` closes.
        if code != -1 and not running.log_pump.is_alive() and running.logged[0] <= _CATCH_UP_MAX_BYTES:
            await self._call(self._catch_up_logs, running)
        oom = False
        with contextlib.suppress(APIError, DockerException):
            state = (await self._call(self._client.inspect_container, running.container_id))["State"]
            oom = bool(state.get("OOMKilled"))
            if not oom and signal_exit_code(code) == -signal.SIGKILL and not running.stopped:
                oom = await self._call(self._oom_recorded, running.container_id)
        await self._remove(running.container_id)  # after the events: a removed container's late OOM is dropped
        if oom:
            return TaskExit(code, oom_reason(running.memory_bytes), oom_killed=True)
        return TaskExit(signal_exit_code(code) if running.stopped else code)

    def _oom_recorded(self, container_id: str) -> bool:
        """Whether a SIGKILL Iris did not send (an OOM kill or someone's ``docker kill``) was the kernel's OOM killer,
        though the engine's ``OOMKilled`` is false: the kernel's log says (kernel_oom.py; the engine's OOM event can
        miss a task killed as it started), or, when that log cannot be read (not root), the engine's ``oom`` event."""
        recorded = kernel_oom.oom_killed(container_id)
        return recorded if recorded is not None else self._oom_event(container_id)

    def _oom_event(self, container_id: str) -> bool:
        """Whether the engine logged an ``oom`` event for the container, waiting `_OOM_EVENT_WAIT_SECONDS` for one.

        ``OOMKilled`` is taken from containerd's OOM event as the exit is handled (and, depending on the Docker
        version, set or not when that event comes later); the event is logged whenever it comes.
        """
        now = time.time()  # the API reads whole seconds; the filter keeps this container's events only
        events = self._client.events(
            since=int(now) - 24 * 3600, until=math.ceil(now + _OOM_EVENT_WAIT_SECONDS),
            filters={"container": container_id, "event": "oom"}, decode=True,
        )  # fmt: skip
        try:
            return any(event.get("Action") == "oom" for event in events)
        finally:
            events.close()

    async def _remove(self, container_id: str) -> None:
        try:
            await self._call(self._client.remove_container, container_id, force=True)
        except NotFound:
            pass
        except (APIError, DockerException) as exc:
            logger.warning("container removal failed", container=container_id[:12], error=str(exc))


def _explain(exc: BaseException) -> str:
    """The engine's own one-line explanation of an API error."""
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc).strip().splitlines()[0] if str(explanation or exc).strip() else type(exc).__name__
