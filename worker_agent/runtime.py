"""How the worker agent starts, waits for and kills one task attempt: the ContainerRuntime seam.

Why a protocol: the agent's ``run_task`` activity should not care whether a task is a host
process, a Docker container or a containerd task; it starts a ``TaskSpec`` and gets back a
``RunningTask`` it can wait for or kill. ``ProcessRuntime`` is the implementation for local
clusters, tests and bare hosts.

Kill semantics matter more than they look: an accelerator (a TPU chip, a GPU) stays locked while
any process of a dead task lingers, so a task runs in its own process group (its own session) and
killing it signals the whole group: SIGTERM, a grace period, then SIGKILL. When the task's main
process exits on its own, processes it left behind in its group are swept the same way. A
process that calls ``setsid`` itself leaves the group and escapes this; containers (cgroups) are
the answer to that, not this runtime.

The agent must reap orphans it inherits: if it runs as PID 1 in a container, run it under an
init (``docker run --init``/tini), otherwise swept grandchildren stay zombies.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final, Protocol

import structlog

__all__ = [
    "DEFAULT_INHERITED_ENV",
    "ContainerRuntime",
    "ProcessRuntime",
    "ProcessTask",
    "RunningTask",
    "TaskSpec",
    "TaskStartError",
    "task_environment",
]

logger = structlog.get_logger(__name__)

# The few host variables a task needs to behave like a normal login process (find executables,
# a home, a locale, a temp dir) and to import Iris when it is not installed system-wide
# (PYTHONPATH, VIRTUAL_ENV). Everything else from the agent's own environment (credentials,
# Temporal addresses, ...) stays out of the task unless the job asks for it.
DEFAULT_INHERITED_ENV: Final = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
    "VIRTUAL_ENV",
)

_POLL_SECONDS: Final = 0.02
_MAX_POLL_SECONDS: Final = 0.2
_REAP_SECONDS: Final = 1.0


class TaskStartError(Exception):
    """A task could not be started (missing executable, bad working directory, ...).

    The message is meant for the user as is, e.g. ``cannot start task: executable 'foo' not
    found``; the agent reports it as the attempt's failure.
    """


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """What to run for one task attempt, independent of the runtime that runs it.

    - ``argv``: the command; ``argv[0]`` is looked up on the task's ``PATH`` unless it has a '/'.
    - ``log``: an open binary file with a descriptor (``LogStore.open_writer``) receiving stdout
      and stderr interleaved. The caller owns it: keep it open until ``wait``/``kill`` returns,
      then close it.
    - ``env``: variables set for the task, over the runtime's minimal inherited environment.
    - ``cwd``: working directory (None: the runtime's choice, the agent's cwd for processes).
    - ``image``: container image for container runtimes; ``ProcessRuntime`` ignores it.
    """

    argv: Sequence[str]
    log: BinaryIO
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    image: str | None = None

    def __post_init__(self) -> None:
        argv = tuple(self.argv)
        if not argv:
            raise ValueError("TaskSpec.argv must name a command")
        for arg in argv:
            if not isinstance(arg, str) or "\0" in arg:
                raise ValueError(f"TaskSpec.argv entries must be str without NUL, got {arg!r}")
        env = dict(self.env)
        for key, value in env.items():
            if not isinstance(key, str) or not key or "=" in key or "\0" in key:
                raise ValueError(f"TaskSpec.env has an invalid variable name {key!r}")
            if not isinstance(value, str) or "\0" in value:
                raise ValueError(f"TaskSpec.env[{key!r}] must be a str without NUL, got {value!r}")
        if self.cwd is not None and (not self.cwd or "\0" in self.cwd):
            raise ValueError(f"TaskSpec.cwd must be a non-empty path, got {self.cwd!r}")
        object.__setattr__(self, "argv", argv)
        object.__setattr__(self, "env", env)


class RunningTask(Protocol):
    """A started task attempt. ``kill`` is idempotent and safe to call concurrently with ``wait``."""

    @property
    def pid(self) -> int:
        """Process id of the task's main process (on the host, or the container's init)."""
        ...

    async def wait(self) -> int:
        """Wait for the task to end; its exit code (negative: killed by that signal)."""
        ...

    async def kill(self, grace_seconds: float = 10.0) -> int:
        """SIGTERM the whole task, SIGKILL what remains after the grace; return its exit code."""
        ...

    def is_running(self) -> bool:
        """Whether any process of the task is still alive."""
        ...


class ContainerRuntime(Protocol):
    """Starts task attempts; one instance per agent, shared by all its tasks."""

    name: str

    async def start(self, spec: TaskSpec) -> RunningTask:
        """Start ``spec``; raise TaskStartError if it cannot be started at all."""
        ...


def task_environment(
    spec_env: Mapping[str, str],
    inherit: Iterable[str] = DEFAULT_INHERITED_ENV,
    host_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment a task process gets: inherited host variables, defaults, then ``spec_env``.

    ``PYTHONUNBUFFERED=1`` is a default (the job may override it) so Python tasks' prints reach
    the log as they happen instead of when a buffer fills.
    """
    host = os.environ if host_env is None else host_env
    env = {name: host[name] for name in inherit if name in host}
    env.setdefault("PATH", os.defpath)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(spec_env)
    return env


def _group_members(pgid: int) -> list[int] | None:
    """Live (non-zombie) processes in group ``pgid`` per /proc; None where /proc is unavailable."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdecimal():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # the process exited while we looked
        # Format: "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def process_group_alive(pgid: int) -> bool:
    """Whether any non-zombie process remains in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    members = _group_members(pgid)
    return True if members is None else bool(members)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _start_failure(spec: TaskSpec, exc: OSError) -> str:
    """A user-facing reason for a failed exec, telling a bad cwd from a bad executable."""
    if spec.cwd is not None and exc.filename == spec.cwd:
        return f"cannot start task: working directory {spec.cwd!r} is unusable ({exc.strerror})"
    executable = spec.argv[0]
    if isinstance(exc, FileNotFoundError):
        return f"cannot start task: executable {executable!r} not found"
    if isinstance(exc, PermissionError):
        return f"cannot start task: permission denied running {executable!r}"
    return f"cannot start task {executable!r}: {exc.strerror or exc}"


class ProcessTask:
    """A task running as a host process that leads its own process group."""

    def __init__(self, process: asyncio.subprocess.Process, straggler_grace_seconds: float) -> None:
        self._process = process
        self._straggler_grace = straggler_grace_seconds
        self._lock = asyncio.Lock()
        self._group_gone = False

    @property
    def pid(self) -> int:
        """Process id of the main process, which is also the task's process-group id."""
        return self._process.pid

    @property
    def pgid(self) -> int:
        """The task's process-group id (the main process started a new session)."""
        return self._process.pid

    def is_running(self) -> bool:
        """Whether the main process or anything left in its process group is alive."""
        return self._process.returncode is None or self._alive()

    async def wait(self) -> int:
        """Wait for the main process to exit, then sweep what it left behind in its group."""
        code = await self._process.wait()
        async with self._lock:
            await self._terminate_group(self._straggler_grace)
        return code

    async def kill(self, grace_seconds: float = 10.0) -> int:
        """SIGTERM the group, wait up to ``grace_seconds`` for all of it to exit, then SIGKILL.

        Idempotent: on a task already gone it only returns the exit code. If this call is
        cancelled during the grace period the group is still SIGKILLed.
        """
        if grace_seconds < 0:
            raise ValueError(f"grace_seconds must be >= 0, got {grace_seconds}")
        async with self._lock:
            await self._terminate_group(grace_seconds)
            code = await self._process.wait()
        logger.debug("task killed", pid=self.pid, exit_code=code)
        return code

    def _alive(self) -> bool:
        """Whether the group has live members; latched to False once the group has emptied.

        The latch matters: after the main process is reaped and its group has emptied, the
        number may be reused by an unrelated process group, which must never be signalled.
        """
        if self._group_gone:
            return False
        if process_group_alive(self.pgid):
            return True
        if self._process.returncode is not None:
            self._group_gone = True
        return False

    async def _terminate_group(self, grace_seconds: float) -> None:
        if not self._alive():
            return
        _signal_group(self.pgid, signal.SIGTERM)
        try:
            await self._wait_group_gone(grace_seconds)
        finally:
            if self._alive():
                _signal_group(self.pgid, signal.SIGKILL)
                await self._wait_group_gone(_REAP_SECONDS)

    async def _wait_group_gone(self, seconds: float) -> None:
        """Poll (with backoff) until the group is empty or ``seconds`` pass."""
        pause = _POLL_SECONDS
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while self._alive():
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, _MAX_POLL_SECONDS)


class ProcessRuntime:
    """Runs each task as a fresh host subprocess in its own session and process group.

    stdin is /dev/null; stdout and stderr both go to the spec's log file; the environment is
    ``task_environment(spec.env, inherit_env)``. ``spec.image`` is ignored (logged), so jobs
    that name an image still run on a process-only local cluster.
    """

    name = "process"

    def __init__(
        self,
        *,
        inherit_env: Iterable[str] = DEFAULT_INHERITED_ENV,
        straggler_grace_seconds: float = 2.0,
    ) -> None:
        if straggler_grace_seconds < 0:
            raise ValueError(f"straggler_grace_seconds must be >= 0, got {straggler_grace_seconds}")
        self._inherit_env = tuple(inherit_env)
        self._straggler_grace = straggler_grace_seconds

    async def start(self, spec: TaskSpec) -> ProcessTask:
        """Start the process; raise TaskStartError with a user-facing reason if it cannot start."""
        if spec.image is not None:
            logger.info("process runtime ignores the task image", image=spec.image)
        executable = spec.argv[0]
        try:
            process = await asyncio.create_subprocess_exec(
                *spec.argv,
                stdin=subprocess.DEVNULL,
                stdout=spec.log,
                stderr=subprocess.STDOUT,
                env=task_environment(spec.env, self._inherit_env),
                cwd=spec.cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise TaskStartError(_start_failure(spec, exc)) from exc
        except ValueError as exc:
            raise TaskStartError(f"cannot start task {executable!r}: {exc}") from exc
        logger.debug("task started", pid=process.pid, argv=list(spec.argv))
        return ProcessTask(process, self._straggler_grace)
