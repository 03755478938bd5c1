"""Build the runtime an agent was asked for, by name: the one place that maps names to classes.

Container runtimes import their engine clients (docker SDK, gRPC) only when chosen, so a
process-only worker does not need them.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from activities.extras import RUNTIME_EXTRAS, missing_extra
from worker_agent.runtimes.base import ContainerRuntime, RuntimeName
from worker_agent.runtimes.process import ProcessRuntime, TaskUser

__all__ = ["DEFAULT_CONTAINERD_SOCKET", "RuntimeOptions", "make_runtime", "shared_task_dir", "task_user"]

DEFAULT_CONTAINERD_SOCKET: Final = "/run/containerd/containerd.sock"


@dataclass(frozen=True, kw_only=True)
class RuntimeOptions:
    """Settings of the runtimes, as ``iris worker serve`` takes them.

    - ``task_user``: who process tasks run as; ``"auto"`` means ``nobody`` when the agent runs
      as root and the agent's own user otherwise, ``""`` the agent's own user always.
    - ``docker_host``: the Docker engine's URL (None: ``DOCKER_HOST`` or the default socket).
    - ``containerd_socket``: containerd's CRI socket.
    - ``container_python``: the interpreter on an image's PATH that runs shipped callables.
    - ``cri_log_dir``: where containerd writes task logs for the agent to follow (a path both see).
    - ``lease_seconds``: the attempts' lease (docs/reliability.md); None: process tasks are not fenced.
    """

    worker_id: str
    ledger_dir: Path | None = None
    task_user: str = "auto"
    docker_host: str | None = None
    containerd_socket: str = DEFAULT_CONTAINERD_SOCKET
    container_python: str = "python3"
    cri_log_dir: Path | None = None
    lease_seconds: float | None = None  # process tasks die this long after the agent's last recorded heartbeat


def task_user(name: str) -> TaskUser | None:
    """The user process tasks run as, from the ``task_user`` setting; ValueError if unknown."""
    if name == "auto":
        return TaskUser.lookup("nobody") if os.geteuid() == 0 else None
    return TaskUser.lookup(name) if name else None


def shared_task_dir(name: str, options: RuntimeOptions) -> Path | None:
    """Where task areas go when process tasks run as another user: a temp dir they can traverse.

    None (the agent's default, beside its state) otherwise: containers mount their area and
    same-user processes reach it anyway.
    """
    if name != RuntimeName.PROCESS or task_user(options.task_user) is None:
        return None
    return Path(tempfile.gettempdir()) / "iris-tasks" / options.worker_id.replace("/", "_")


def _container_leases(options: RuntimeOptions) -> Path | None:
    """Where a container runtime keeps its leases: beside the process ledger (which holds only its own entries)."""
    return options.ledger_dir.parent / "container-leases" if options.ledger_dir is not None else None


def make_runtime(name: str, options: RuntimeOptions) -> ContainerRuntime:
    """The runtime called ``name``; ValueError naming the choices (or the engine's problem) otherwise."""
    try:
        runtime = RuntimeName(name)
    except ValueError:
        choices = ", ".join(r.value for r in RuntimeName)
        raise ValueError(f"--runtime: must be one of {choices}, got {name!r}") from None
    if runtime is RuntimeName.PROCESS:
        return ProcessRuntime(
            ledger_dir=options.ledger_dir, run_as=task_user(options.task_user), lease_seconds=options.lease_seconds
        )
    try:
        return _engine_runtime(runtime, options)
    except ModuleNotFoundError as exc:
        raise ValueError(missing_extra(f"--runtime: {runtime.value}", RUNTIME_EXTRAS[runtime.value], exc)) from None


def _engine_runtime(runtime: RuntimeName, options: RuntimeOptions) -> ContainerRuntime:
    """A docker or containerd runtime; their client libraries come with the extra of that name."""
    if runtime is RuntimeName.DOCKER:
        from worker_agent.runtimes.docker import DockerRuntime

        try:
            return DockerRuntime(
                worker_id=options.worker_id, docker_host=options.docker_host, python=options.container_python,
                lease_seconds=options.lease_seconds,
                ledger_dir=_container_leases(options),
            )  # fmt: skip
        except ValueError as exc:
            raise ValueError(f"--docker-host: {exc}") from None
    import grpc

    from worker_agent.runtimes.containerd import ContainerdRuntime
    from worker_agent.runtimes.cri_client import CriClient

    try:
        with CriClient(options.containerd_socket, timeout=10) as cri:
            cri.version()
    except grpc.RpcError as exc:
        detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        raise ValueError(f"--containerd-socket: no CRI answers at {options.containerd_socket} ({detail})") from None
    return ContainerdRuntime(
        worker_id=options.worker_id, socket=options.containerd_socket, python=options.container_python,
        log_dir=options.cri_log_dir, lease_seconds=options.lease_seconds,
        ledger_dir=_container_leases(options),
    )
