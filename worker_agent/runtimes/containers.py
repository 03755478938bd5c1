"""What the two container runtimes (docker.py, containerd.py) share: one container per attempt, waited
for and stopped through one path, fenced by its lease.

Each engine says how to stop a container (`_stop`) and how to collect its end (`_collect`: wait for it,
drain its log, read its exit and remove it); everything around those is here, once: `wait` and `kill`
share one collection per container (concurrent callers get the same exit), a stop after a lease expired
reads as fenced, and an exit is kept for the callers that ask after the container is gone.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from worker_agent.runtimes.base import FinishedTasks, RuntimeName, TaskExit, TaskHandle, lease_expired_reason
from worker_agent.runtimes.container_leases import ContainerLeases


@dataclass(kw_only=True)
class RunningContainer:
    """What a container runtime keeps of a started container until it is gone (an engine adds its own)."""

    container_id: str
    memory_bytes: int
    log_pump: threading.Thread
    stopped: bool = False  # stopped by `kill`: its exit code is read as the signal's
    finish: asyncio.Future[TaskExit] | None = None  # the one collection, shared by wait and kill
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


R = TypeVar("R", bound=RunningContainer)


class ContainerRuntime(Generic[R]):
    """The part of a container runtime that does not depend on its engine (see the module)."""

    _python: str
    _leases: ContainerLeases | None
    _running: dict[TaskHandle, R]
    _finished: FinishedTasks

    @property
    def name(self) -> RuntimeName:
        raise NotImplementedError

    @property
    def leases(self) -> bool:
        """Whether containers are fenced by their leases (with a lease, and an agent that sees the engine's pids)."""
        return self._leases is not None and self._leases.enforced

    def renew(self, handle: TaskHandle, deadline: float) -> None:
        """Move the lease of ``handle``'s container to ``deadline`` (``lease_clock()``)."""
        if self._leases is not None:
            self._leases.renew(handle, deadline)

    @property
    def python(self) -> str:
        """The interpreter, on the image's PATH, that runs shipped callables."""
        return self._python

    async def wait(self, handle: TaskHandle) -> TaskExit:
        """Wait for the container to exit, drain its log, remove it; its exit."""
        running = self._running.get(handle)
        if running is None:
            return self._known_exit(handle)
        return await self._finish(handle, running)

    async def kill(self, handle: TaskHandle, grace_seconds: float = 10.0) -> TaskExit:
        """Stop the container (SIGTERM, SIGKILL after the grace), then remove it; idempotent."""
        if grace_seconds < 0:
            raise ValueError(f"grace_seconds must be >= 0, got {grace_seconds}")
        running = self._running.get(handle)
        if running is None:
            return self._known_exit(handle)
        running.stopped = True
        await self._stop(running, grace_seconds)
        return await self._finish(handle, running)

    async def _stop(self, running: R, grace_seconds: float) -> None:
        """Ask the engine to stop the container; a failure is logged, and collecting removes it anyway."""
        raise NotImplementedError

    async def _collect(self, running: R) -> TaskExit:
        """Wait for the container's exit, drain its log, remove it: its exit."""
        raise NotImplementedError

    async def _finish(self, handle: TaskHandle, running: R) -> TaskExit:
        """Once per container (shared by concurrent wait/kill): collect it, then record its exit."""
        async with running.lock:
            if running.finish is None:
                running.finish = asyncio.ensure_future(self._collect(running))
        exit = await asyncio.shield(running.finish)
        self._running.pop(handle, None)
        if self._leases is not None and self._leases.forget(handle):
            exit = TaskExit(exit.exit_code, lease_expired_reason(), fenced=True)
        return self._finished.record(handle, exit)

    def _known_exit(self, handle: TaskHandle) -> TaskExit:
        exit = self._finished.get(handle)
        if exit is None:
            raise KeyError(f"no task {handle} in this {self.name} runtime")
        return exit
