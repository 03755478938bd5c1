"""One agent per worker id on a host: a lock on its state directory, held for the agent's life."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from worker_agent.registration import RegistrationRefused

__all__ = ["AgentAlreadyRunning", "AgentStateLock"]


class AgentAlreadyRunning(RegistrationRefused):
    """Another agent with the same worker id (the same state directory) runs on this host."""


class AgentStateLock:
    """A lock on the agent's state directory, held for the agent's life.

    The lock (`flock`, released by the kernel when the agent dies) keeps a second agent with
    the same worker id from touching the tasks of one that is alive: only the holder may
    recover (kill) what an earlier agent of this worker left running.
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._lock_file: IO[str] | None = None
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def lock(self) -> None:
        """Take the state directory for this agent; AgentAlreadyRunning if another live agent holds it."""
        if self.directory is None or self._lock_file is not None:
            return
        f = open(self.directory.parent / "agent.lock", "a+")  # noqa: SIM115 - held until unlock()
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            raise AgentAlreadyRunning(
                f"another agent (pid {holder}) already serves this worker id on this host "
                f"(state directory {self.directory.parent} is locked)"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._lock_file = f

    def unlock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing the descriptor releases the flock
            self._lock_file = None
