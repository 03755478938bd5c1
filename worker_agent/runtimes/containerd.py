"""The containerd runtime: each task attempt is a CRI pod with one container, over containerd's CRI socket.

For Kubernetes hosts (CoreWeave nodes), where containerd is the engine and Docker is absent. It
speaks the Container Runtime Interface v1 (``runtime.v1``, the subset in ``cri/``) as the
kubelet does, so the engine's own bookkeeping (``crictl ps``) shows Iris's tasks.

Choices, and why:

- One pod sandbox per task, in the node's network namespace (no CNI needed; multi-host
  collectives reach peers by host address) and with a pod-wide PID namespace, so the sandbox's
  pause process is PID 1: a SIGTERM reaches the task (a bare PID 1 ignores it).
- Limits from the job's request: a CPU quota per 100 ms period and a hard memory limit; an
  OOM kill is reported as such (the CRI says ``reason: OOMKilled``; where it does not, for a SIGKILL
  Iris did not send, the kernel's own log decides: kernel_oom.py, the race it covers is the runc shim's).
- Only the task's own paths are mounted, at the same path, plus the task runner's code
  read-only; accelerator device nodes of the host are passed through when present.
- Labels ``iris-job-id``, ``iris-task-id``, ``iris-attempt``, ``iris-worker-id`` on pod and
  container; ``recover`` removes this worker's leftover pods. After a task ends its pod is
  stopped and removed, so the CRI lists only running tasks.
- Logs: the CRI writes ``<time> <stream> <P|F> <text>`` records to a file under ``log_dir``; a
  thread per task follows that file and writes the task's own bytes to the log store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import secrets
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

import grpc
import structlog

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
from worker_agent.runtimes.cri import cri_runtime_v1_pb2 as cri
from worker_agent.runtimes.cri import cri_runtime_v1_pb2_grpc as cri_grpc
from worker_agent.runtimes.cri_client import CriLogParser, channel_target
from worker_agent.runtimes.docker import accelerator_devices, container_name

__all__ = ["ContainerdRuntime"]

logger = structlog.get_logger(__name__)

_RPC_TIMEOUT_SECONDS: Final = 60.0
_PULL_TIMEOUT_SECONDS: Final = 600.0
_CPU_PERIOD_US: Final = 100_000
_POD_NAMESPACE: Final = "iris"
_LOG_FILE: Final = "task.log"
_POLL_SECONDS: Final = 0.05
_MAX_POLL_SECONDS: Final = 0.5
_LOG_DRAIN_SECONDS: Final = 10.0
_LOG_QUIET_SECONDS: Final = 0.2


@dataclass(kw_only=True)
class _Running(RunningContainer):
    """A started task's container, and its pod and log files."""

    pod_id: str
    log_dir: Path
    exited: threading.Event


class ContainerdRuntime(ContainerRuntime[_Running]):
    """Runs each task attempt as a CRI pod on containerd; the handle is the container id."""

    def __init__(
        self,
        *,
        worker_id: str,
        socket: str = "/run/containerd/containerd.sock",
        python: str = "python3",
        log_dir: Path | None = None,
        pass_devices: bool = True,
        lease_seconds: float | None = None,
        ledger_dir: Path | None = None,
    ) -> None:
        # With a lease, the lease watchdog kills the task's process group (the container's main process,
        # which leads its own session) when its agent stops renewing it (container_leases).
        self._leases = ContainerLeases(lease_seconds, ledger_dir) if lease_seconds is not None else None
        self._worker_id = worker_id
        self._socket = socket
        self._python = python
        self._log_root = log_dir or Path(tempfile.gettempdir()) / "iris-cri-logs" / worker_id.replace("/", "_")
        self._devices = accelerator_devices() if pass_devices else []
        self._channel: grpc.aio.Channel | None = None
        self._running: dict[TaskHandle, _Running] = {}
        self._finished = FinishedTasks()

    @property
    def name(self) -> RuntimeName:
        """Always ``containerd``."""
        return RuntimeName.CONTAINERD

    def _stubs(self) -> tuple[cri_grpc.RuntimeServiceStub, cri_grpc.ImageServiceStub]:
        # The channel is made on first use, inside the agent's event loop (grpc.aio binds to it).
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(channel_target(self._socket))
        return cri_grpc.RuntimeServiceStub(self._channel), cri_grpc.ImageServiceStub(self._channel)

    async def start(self, spec: TaskSpec) -> TaskHandle:
        """Run a pod for the task and start its container; TaskStartError if either fails."""
        if not spec.image:
            raise TaskStartError(
                "cannot start task: the containerd runtime needs an image (the job's image= / --image, "
                "or the worker's --default-image)"
            )
        runtime, _ = self._stubs()
        await self._ensure_image(spec.image)
        name = container_name(spec)
        labels = {**spec.labels(), LABEL_WORKER_ID: self._worker_id}
        log_dir = self._log_root / name
        log_dir.mkdir(parents=True, exist_ok=True)
        sandbox = cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name=name, uid=secrets.token_hex(16), namespace=_POD_NAMESPACE,
                                            attempt=spec.attempt),
            log_directory=str(log_dir),
            labels=labels,
            linux=cri.LinuxPodSandboxConfig(
                security_context=cri.LinuxSandboxSecurityContext(
                    namespace_options=cri.NamespaceOption(network=cri.NODE, pid=cri.POD, ipc=cri.POD)
                )
            ),
        )  # fmt: skip
        try:
            pod = await runtime.RunPodSandbox(cri.RunPodSandboxRequest(config=sandbox), timeout=_RPC_TIMEOUT_SECONDS)
        except grpc.aio.AioRpcError as exc:
            shutil.rmtree(log_dir, ignore_errors=True)
            raise TaskStartError(f"cannot start task: the pod sandbox failed: {exc.details()}") from exc
        pod_id = pod.pod_sandbox_id
        try:
            container_id = await self._create_and_start(runtime, pod_id, sandbox, spec, labels)
        except TaskStartError:
            await self._remove_pod(pod_id)
            shutil.rmtree(log_dir, ignore_errors=True)
            raise
        exited = threading.Event()
        pump = threading.Thread(
            target=_follow_log, args=(log_dir / _LOG_FILE, spec.log, exited),
            name=f"iris-cri-logs-{container_id[:12]}", daemon=True,
        )  # fmt: skip
        pump.start()
        handle = TaskHandle(container_id)
        self._running[handle] = _Running(pod_id=pod_id, container_id=container_id, memory_bytes=spec.memory_bytes,
                                         log_dir=log_dir, log_pump=pump, exited=exited)  # fmt: skip
        if self._leases is not None and spec.lease_deadline:
            with contextlib.suppress(grpc.aio.AioRpcError, KeyError, ValueError, TypeError):
                status = await runtime.ContainerStatus(
                    cri.ContainerStatusRequest(container_id=container_id, verbose=True), timeout=_RPC_TIMEOUT_SECONDS
                )
                self._leases.add(handle, int(json.loads(status.info["info"])["pid"]), spec.lease_deadline)
        logger.debug("cri container started", container=container_id[:12], pod=pod_id[:12], task_id=spec.task_id)
        return handle

    async def _create_and_start(
        self,
        runtime: cri_grpc.RuntimeServiceStub,
        pod_id: str,
        sandbox: cri.PodSandboxConfig,
        spec: TaskSpec,
        labels: dict[str, str],
    ) -> str:
        mounts = [cri.Mount(container_path=m.path, host_path=m.path, readonly=m.read_only) for m in spec.mounts]
        runner = runner_code_mounts(spec.runner_code)
        mounts += [cri.Mount(container_path=dst, host_path=src, readonly=True) for src, dst in runner]
        resources = cri.LinuxContainerResources(memory_limit_in_bytes=spec.memory_bytes)
        if spec.cpu_millis:
            resources.cpu_period = _CPU_PERIOD_US
            resources.cpu_quota = spec.cpu_millis * _CPU_PERIOD_US // 1000
        config = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="task", attempt=spec.attempt),
            image=cri.ImageSpec(image=spec.image or ""),
            command=list(spec.argv),
            working_dir=spec.cwd or "",
            envs=[cri.KeyValue(key=k, value=v.encode()) for k, v in container_environment(spec.env).items()],
            mounts=mounts,
            devices=[cri.Device(container_path=d, host_path=d, permissions="rwm") for d in self._devices],
            labels=labels,
            log_path=_LOG_FILE,
            linux=cri.LinuxContainerConfig(resources=resources),
        )
        try:
            created = await runtime.CreateContainer(
                cri.CreateContainerRequest(pod_sandbox_id=pod_id, config=config, sandbox_config=sandbox),
                timeout=_RPC_TIMEOUT_SECONDS,
            )
            await runtime.StartContainer(
                cri.StartContainerRequest(container_id=created.container_id), timeout=_RPC_TIMEOUT_SECONDS
            )
        except grpc.aio.AioRpcError as exc:
            raise TaskStartError(
                f"cannot start task {spec.argv[0]!r} in image {spec.image!r}: {exc.details()}"
            ) from exc
        container_id: str = created.container_id
        return container_id

    async def _stop(self, running: _Running, grace_seconds: float) -> None:
        """StopContainer (SIGTERM, SIGKILL after the grace); if it fails, collecting removes the pod anyway."""
        runtime, _ = self._stubs()
        try:
            await runtime.StopContainer(
                cri.StopContainerRequest(container_id=running.container_id, timeout=math.ceil(grace_seconds)),
                timeout=_RPC_TIMEOUT_SECONDS + grace_seconds,
            )
        except grpc.aio.AioRpcError as exc:
            logger.warning(
                "cri stop failed; removing the pod", container=running.container_id[:12], error=exc.details()
            )

    async def stats(self, handle: TaskHandle) -> TaskStats | None:
        """Working-set memory and CPU time so far, from the CRI's stats."""
        running = self._running.get(handle)
        if running is None:
            return None
        runtime, _ = self._stubs()
        try:
            response = await runtime.ContainerStats(
                cri.ContainerStatsRequest(container_id=running.container_id), timeout=_RPC_TIMEOUT_SECONDS
            )
        except grpc.aio.AioRpcError:
            return None
        stats = response.stats
        memory = stats.memory.working_set_bytes.value or stats.memory.usage_bytes.value
        return TaskStats(memory_bytes=int(memory), cpu_seconds=stats.cpu.usage_core_nano_seconds.value / 1e9)

    async def recover(self) -> list[RecoveredTask]:
        """Stop and remove every pod labelled with this worker id that this runtime did not start."""
        runtime, _ = self._stubs()
        response = await runtime.ListPodSandbox(
            cri.ListPodSandboxRequest(filter=cri.PodSandboxFilter(label_selector={LABEL_WORKER_ID: self._worker_id})),
            timeout=_RPC_TIMEOUT_SECONDS,
        )
        ours = {r.pod_id for r in self._running.values()}
        containers = await runtime.ListContainers(
            cri.ListContainersRequest(filter=cri.ContainerFilter(label_selector={LABEL_WORKER_ID: self._worker_id})),
            timeout=_RPC_TIMEOUT_SECONDS,
        )
        by_pod = {c.pod_sandbox_id: c.id for c in containers.containers}
        recovered = []
        for pod in response.items:
            if pod.id in ours:
                continue
            await self._remove_pod(pod.id)
            shutil.rmtree(self._log_root / pod.metadata.name, ignore_errors=True)
            recovered.append(
                RecoveredTask(
                    TaskHandle(by_pod.get(pod.id, pod.id)), pod.labels.get(LABEL_JOB_ID, ""),
                    pod.labels.get(LABEL_TASK_ID, ""), "killed",
                )
            )  # fmt: skip
        return recovered

    async def listed(self) -> list[TaskHandle]:
        """Ids of the containers the CRI lists for this worker (any state)."""
        runtime, _ = self._stubs()
        response = await runtime.ListContainers(
            cri.ListContainersRequest(filter=cri.ContainerFilter(label_selector={LABEL_WORKER_ID: self._worker_id})),
            timeout=_RPC_TIMEOUT_SECONDS,
        )
        return [TaskHandle(c.id) for c in response.containers]

    async def close(self) -> None:
        """Close the CRI channel (and drop the log directory if no task uses it); running tasks are left alone."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
        if self._leases is not None:
            self._leases.close()
        for directory in (self._log_root, self._log_root.parent):
            with contextlib.suppress(OSError):
                directory.rmdir()

    # -- internals ---------------------------------------------------------------------------

    async def _ensure_image(self, image: str) -> None:
        """The image is present, or pulled; TaskStartError naming it otherwise."""
        _, images = self._stubs()
        spec = cri.ImageSpec(image=image)
        try:
            status = await images.ImageStatus(cri.ImageStatusRequest(image=spec), timeout=_RPC_TIMEOUT_SECONDS)
            if status.image.id:
                return
            await images.PullImage(cri.PullImageRequest(image=spec), timeout=_PULL_TIMEOUT_SECONDS)
        except grpc.aio.AioRpcError as exc:
            raise TaskStartError(
                f"cannot start task: image {image!r} is not on this worker and could not be pulled ({exc.details()})"
            ) from exc

    async def _collect(self, running: _Running) -> TaskExit:
        status = await self._wait_exited(running.container_id)
        running.exited.set()
        await asyncio.to_thread(running.log_pump.join, _LOG_DRAIN_SECONDS)
        await self._remove_pod(running.pod_id)
        shutil.rmtree(running.log_dir, ignore_errors=True)
        if status is None:
            return TaskExit(-1, "the container vanished from containerd before it exited")
        if status.reason == "OOMKilled" or await self._oom_recorded(running, status.exit_code):
            return TaskExit(status.exit_code, oom_reason(running.memory_bytes), oom_killed=True)
        return TaskExit(signal_exit_code(status.exit_code) if running.stopped else status.exit_code)

    @staticmethod
    async def _oom_recorded(running: _Running, exit_code: int) -> bool:
        """Whether a SIGKILL Iris did not send was the kernel's OOM killer though the CRI gave no reason: containerd
        takes ``OOMKilled`` from the same runc shim's OOM watch as Docker does, which can miss a task killed as it
        started. False when the kernel's log cannot be read (not root): the CRI has no OOM event to ask instead."""
        if running.stopped or signal_exit_code(exit_code) != -signal.SIGKILL:
            return False
        return await asyncio.to_thread(kernel_oom.oom_killed, running.container_id) is True

    async def _wait_exited(self, container_id: str) -> cri.ContainerStatus | None:
        """Poll the container's status (with backoff) until it has exited; None if it is gone."""
        runtime, _ = self._stubs()
        pause = _POLL_SECONDS
        while True:
            try:
                response = await runtime.ContainerStatus(
                    cri.ContainerStatusRequest(container_id=container_id), timeout=_RPC_TIMEOUT_SECONDS
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    return None
                raise
            if response.status.state == cri.CONTAINER_EXITED:
                return response.status
            await asyncio.sleep(pause)
            pause = min(pause * 1.5, _MAX_POLL_SECONDS)

    async def _remove_pod(self, pod_id: str) -> None:
        runtime, _ = self._stubs()
        for call, request in (
            (runtime.StopPodSandbox, cri.StopPodSandboxRequest(pod_sandbox_id=pod_id)),
            (runtime.RemovePodSandbox, cri.RemovePodSandboxRequest(pod_sandbox_id=pod_id)),
        ):
            try:
                await call(request, timeout=_RPC_TIMEOUT_SECONDS)  # type: ignore[operator]
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.NOT_FOUND:
                    logger.warning("cri pod removal failed", pod=pod_id[:12], error=exc.details())

def _follow_log(path: Path, sink: BinaryIO, exited: threading.Event) -> None:
    """Copy the task's output from the CRI log file into ``sink`` until the task has exited (a thread)."""
    parser = CriLogParser()
    deadline = None
    while not path.exists():
        if exited.is_set():
            deadline = deadline or time.monotonic() + 1.0
            if time.monotonic() > deadline:
                return
        time.sleep(_POLL_SECONDS)
    try:
        with open(path, "rb") as source:
            quiet_since = None
            while True:
                data = source.read(1 << 16)
                if data:
                    sink.write(parser.feed(data))
                    quiet_since = None
                    continue
                if exited.is_set():
                    # The engine may still be flushing the last records: stop after a short quiet spell.
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > _LOG_QUIET_SECONDS:
                        break
                time.sleep(_POLL_SECONDS)
            with contextlib.suppress(ValueError):
                sink.write(parser.finish())
    except (OSError, ValueError) as exc:
        logger.warning("cri log stream ended early", path=str(path), error=str(exc))
