"""Leases for container tasks: the lease watchdog kills a container by its init process, seen from the host.

Why by the init's host pid rather than through the engine: the engine (dockerd, containerd) is one
more thing that can hang with the host, and a kill through it is a request, not a fence. SIGKILL to a
container's PID 1 ends its whole pid namespace in the kernel, whatever the engine does; the init
(``docker run --init``, or the runtime's shim child) leads its own session, so the watchdog's
``killpg`` reaches it like a process task's group. The same ledger format and watchdog as the process
runtime (``lease_watchdog``), keyed by that pid.

This needs the agent to see the engine's processes (the host's pid namespace, as an agent on the
host does). An agent that cannot (it runs in a container of its own) does not fence container
tasks: ``add`` says so and the attempt heartbeats without a lease, as before leases.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Final

import structlog

from worker_agent.runtimes.base import TaskHandle
from worker_agent.runtimes.process import LeaseWatchdog, ProcessGroupLedger

__all__ = ["ContainerLeases"]

logger = structlog.get_logger(__name__)
_MAX_TICK_SECONDS: Final = 0.5


def _own_pid_namespace(pid: int) -> bool | None:
    """Whether `pid` lives in this process's pid namespace (None: no such process visible here)."""
    try:
        return Path(f"/proc/{pid}/ns/pid").readlink() == Path("/proc/self/ns/pid").readlink()
    except OSError:
        return None


class ContainerLeases:
    """The leases of one runtime's containers: ledger entries by init pid, and the watchdog enforcing them."""

    def __init__(self, lease_seconds: float, ledger_dir: Path | None) -> None:
        if not lease_seconds > 0:
            raise ValueError(f"lease_seconds must be > 0, got {lease_seconds}")
        directory = ledger_dir or Path(tempfile.mkdtemp(prefix="iris-container-leases-"))
        self._ledger = ProcessGroupLedger(directory)
        self._watchdog = LeaseWatchdog(directory, min(_MAX_TICK_SECONDS, lease_seconds / 10))
        self._pids: dict[TaskHandle, int] = {}
        self.enforced = True  # False once a container's init turned out invisible from here

    def add(self, handle: TaskHandle, pid: int, deadline: float) -> bool:
        """Fence `handle`'s container (init `pid` as the host sees it) until `deadline`; False if it cannot be."""
        if pid <= 0 or _own_pid_namespace(pid) is not False:
            if self.enforced:
                self.enforced = False
                logger.warning("container_tasks_not_fenced", why="the agent does not see the engine's processes")
            return False
        self._watchdog.ensure()
        self._ledger.add(pid, deadline)
        self._pids[handle] = pid
        return True

    def renew(self, handle: TaskHandle, deadline: float) -> None:
        """Move the lease of `handle`'s container; nothing if it is not fenced."""
        pid = self._pids.get(handle)
        if pid is not None:
            self._ledger.renew(pid, deadline)
            self._watchdog.ensure()

    def forget(self, handle: TaskHandle) -> bool:
        """Drop `handle`'s entry; whether the watchdog killed it because its lease expired."""
        pid = self._pids.pop(handle, None)
        if pid is None:
            return False
        fenced = self._ledger.fenced(pid)
        self._ledger.remove(pid)
        return fenced

    def close(self) -> None:
        """Let go of the watchdog (it enforces what is left, then exits)."""
        self._watchdog.close()
