"""The ContainerRuntime seam: how the worker agent starts, waits for, kills and recovers a task attempt.

Why one small protocol: the agent's ``run_task`` activity must not care whether a task is a host
process, a Docker container or a containerd (CRI) container. It hands a ``TaskSpec`` to
``start`` and gets back an opaque ``TaskHandle`` (a string: a process-group id, a container id),
which it can ``wait`` for, ``kill`` (SIGTERM, a grace period, then SIGKILL) or ask for ``stats``.
Nothing the agent holds is a process object, so a restarted agent can find what an earlier one
started: ``recover`` kills every task the engine still runs for this worker (the attempts it
belonged to are already counted as lost and re-run elsewhere), so nothing runs unaccounted.

Every runtime streams the task's stdout and stderr, interleaved, into ``spec.log`` (the log
store's writer) while the task runs, and ``wait`` returns only once the log is complete.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final, NewType, Protocol, runtime_checkable

from activities.contracts import LEASE_EXPIRED_REASON, RuntimeName

__all__ = [
    "CONTAINER_PATH",
    "DEFAULT_INHERITED_ENV",
    "LABEL_ATTEMPT",
    "LABEL_JOB_ID",
    "LABEL_TASK_ID",
    "LABEL_WORKER_ID",
    "ContainerRuntime",
    "FinishedTasks",
    "LeasedRuntime",
    "Mount",
    "RecoveredTask",
    "RuntimeName",
    "TaskExit",
    "TaskHandle",
    "TaskSpec",
    "TaskStartError",
    "TaskStats",
    "container_environment",
    "lease_expired_reason",
    "oom_reason",
    "runner_code_mounts",
    "signal_exit_code",
    "task_environment",
]

TaskHandle = NewType("TaskHandle", str)
"""An opaque id of a started task, meaningful only to the runtime that returned it."""

# Labels on every container the agent starts, so a restarted agent (or an operator) can tell
# whose container it is: `docker ps --filter label=iris-worker-id=w1`.
LABEL_JOB_ID: Final = "iris-job-id"
LABEL_TASK_ID: Final = "iris-task-id"
LABEL_ATTEMPT: Final = "iris-attempt"
LABEL_WORKER_ID: Final = "iris-worker-id"

# The few host variables a process task needs to behave like a normal login process (find
# executables, a home, a locale, a temp dir) and to import Iris when it is not installed
# system-wide (PYTHONPATH, VIRTUAL_ENV). Everything else from the agent's own environment
# (credentials, Temporal addresses, ...) stays out of the task unless the job asks for it.
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

# Containers get a conventional PATH of their own: images made with `docker import` have none.
CONTAINER_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where the task runner's code (this package and cloudpickle) appears inside a container.
RUNNER_CODE_DIR: Final = "/opt/iris/python"


class TaskStartError(Exception):
    """A task could not be started (missing executable or image, bad working directory, ...).

    The message is meant for the user as is, e.g. ``cannot start task: executable 'foo' not
    found``; the agent reports it as the attempt's failure.
    """


@dataclass(frozen=True)
class Mount:
    """A host path a task may see; containers see it at the same path (nothing else of the host)."""

    path: str
    read_only: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not Path(self.path).is_absolute() or "\0" in self.path:
            raise ValueError(f"Mount.path must be an absolute path, got {self.path!r}")


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """What to run for one task attempt, independent of the runtime that runs it.

    - ``argv``: the command; ``argv[0]`` is looked up on the task's ``PATH`` unless it has a '/'.
    - ``log``: an open binary file with a descriptor (``LogStore.open_writer``) receiving stdout
      and stderr interleaved. The caller owns it: keep it open until ``wait``/``kill`` returns.
    - ``env``: variables set for the task (the job's env and the ``IRIS_*`` identity).
    - ``cwd``: working directory (None: the runtime's choice, the agent's cwd for processes).
    - ``image``: container image for container runtimes; ``ProcessRuntime`` ignores it.
    - ``job_id``/``task_index``/``attempt``/``worker_id``: who the task is (container labels).
    - ``cpu_millis``/``memory_bytes``: limits container runtimes enforce (0: none).
    - ``mounts``: the task's own paths; a container sees these and nothing else of the host.
    - ``runner_code``: a host directory with a copy of the task runner's code for containers
      (see ``runner_code_mounts``); None mounts it from this process's own packages.
    - ``lease_deadline``: when the attempt's lease runs out unless renewed, on the host's
      ``lease_clock()`` (0: no lease); a runtime with leases kills the task then (``LeasedRuntime``).
    """

    argv: Sequence[str]
    log: BinaryIO
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    image: str | None = None
    job_id: str = ""
    task_index: int = 0
    attempt: int = 0
    worker_id: str = ""
    cpu_millis: int = 0
    memory_bytes: int = 0
    mounts: Sequence[Mount] = ()
    runner_code: str | None = None
    lease_deadline: float = 0.0

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
        for name in ("task_index", "attempt", "cpu_millis", "memory_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"TaskSpec.{name} must be an integer >= 0, got {value!r}")
        deadline = self.lease_deadline
        if isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline < 0:
            raise ValueError(f"TaskSpec.lease_deadline must be a number >= 0, got {self.lease_deadline!r}")
        mounts = tuple(self.mounts)
        if not all(isinstance(m, Mount) for m in mounts):
            raise ValueError("TaskSpec.mounts must hold Mount values")
        object.__setattr__(self, "argv", argv)
        object.__setattr__(self, "env", env)
        object.__setattr__(self, "mounts", mounts)

    @property
    def task_id(self) -> str:
        """``<job id>/task-<index>``, as in ``IRIS_TASK_ID``."""
        return f"{self.job_id}/task-{self.task_index}"

    def labels(self) -> dict[str, str]:
        """The labels a container runtime puts on this task's container."""
        return {
            LABEL_JOB_ID: self.job_id,
            LABEL_TASK_ID: self.task_id,
            LABEL_ATTEMPT: str(self.attempt),
            LABEL_WORKER_ID: self.worker_id,
        }


@dataclass(frozen=True)
class TaskStats:
    """Resource use of a running task, as far as the runtime can tell."""

    memory_bytes: int
    cpu_seconds: float


@dataclass(frozen=True)
class TaskExit:
    """How a task ended: its exit code (negative: killed by that signal) and, if known, why.

    ``reason`` is a one-line explanation from the runtime for an end the exit code alone does
    not explain, e.g. ``OOM-killed: the task exceeded its memory limit of 64 MiB``.
    """

    exit_code: int
    reason: str = ""
    oom_killed: bool = False
    fenced: bool = False  # killed because the attempt's lease expired (its agent stopped renewing it)
    # What the task used in all, when the runtime still knows at its end; not part of how it ended.
    usage: TaskStats | None = field(default=None, compare=False)
    # How long its process ran, from its start to its exit as the runtime saw them (what the attempt is charged
    # for); None when the runtime cannot tell, and the agent times the whole `start` to `wait` instead.
    ran_seconds: float | None = field(default=None, compare=False)

    def charged_seconds(self, began: float) -> float:
        """What the attempt is charged for: the process's run as the runtime saw it, else the time since `began`
        (`time.monotonic()` before the runtime's `start`)."""
        return self.ran_seconds if self.ran_seconds is not None else time.monotonic() - began


@dataclass(frozen=True)
class RecoveredTask:
    """A task an earlier agent of this worker started, found again after a restart, and what was done."""

    handle: TaskHandle
    job_id: str
    task_id: str
    action: str  # "killed"


class ContainerRuntime(Protocol):
    """Starts and controls task attempts; one instance per agent, shared by all its tasks.

    Contracts: ``kill`` is idempotent and safe alongside ``wait``; both return the same
    ``TaskExit``; after either returns, the task (and its container) is gone from the engine.
    """

    @property
    def name(self) -> RuntimeName:
        """Which runtime this is."""
        ...

    @property
    def python(self) -> str:
        """The interpreter that runs shipped callables under this runtime."""
        ...

    async def start(self, spec: TaskSpec) -> TaskHandle:
        """Start ``spec``; raise TaskStartError if it cannot be started at all."""
        ...

    async def wait(self, handle: TaskHandle) -> TaskExit:
        """Wait for the task to end and its log to be complete; then it is gone from the engine."""
        ...

    async def kill(self, handle: TaskHandle, grace_seconds: float = 10.0) -> TaskExit:
        """SIGTERM the whole task, SIGKILL what remains after the grace, remove it; its exit."""
        ...

    async def stats(self, handle: TaskHandle) -> TaskStats | None:
        """Current resource use, or None if the task is gone or the runtime cannot tell."""
        ...

    async def recover(self) -> list[RecoveredTask]:
        """Kill what an earlier agent of this worker left running; what was found."""
        ...

    async def close(self) -> None:
        """Release the runtime's own resources (connections, threads); tasks are not touched."""
        ...


@runtime_checkable
class LeasedRuntime(Protocol):
    """A runtime that fences its tasks: something that is not the agent kills a task whose lease ran out.

    The agent starts a task with ``TaskSpec.lease_deadline`` and moves the deadline with ``renew``
    each time Temporal has recorded a heartbeat of the attempt (docs/reliability.md).
    """

    @property
    def leases(self) -> bool:
        """Whether this runtime's tasks are fenced (it may be built without leases)."""
        ...

    def renew(self, handle: TaskHandle, deadline: float) -> None:
        """Move the task's lease to ``deadline`` on the host's ``lease_clock()``; nothing for a task gone."""
        ...


class FinishedTasks:
    """The exits of the last few hundred finished tasks, so a late ``kill`` of one returns its exit.

    Bounded: an agent that runs for months must not grow with every task it ever ran.
    """

    def __init__(self, keep: int = 512) -> None:
        self._keep = keep
        self._exits: dict[TaskHandle, TaskExit] = {}

    def record(self, handle: TaskHandle, exit: TaskExit) -> TaskExit:
        """Remember ``exit`` for ``handle`` (dropping the oldest beyond the bound); return it."""
        self._exits[handle] = exit
        while len(self._exits) > self._keep:
            del self._exits[next(iter(self._exits))]
        return exit

    def get(self, handle: TaskHandle) -> TaskExit | None:
        """The recorded exit of ``handle``, or None."""
        return self._exits.get(handle)


def lease_expired_reason() -> str:
    """The one-line end of a task killed because its agent stopped renewing the attempt's lease."""
    return LEASE_EXPIRED_REASON


def oom_reason(memory_bytes: int) -> str:
    """The one-line failure of a task the kernel killed for exceeding its memory limit."""
    limit = f" of {memory_bytes / 2**20:g} MiB" if memory_bytes else ""
    return f"OOM-killed: the task exceeded its memory limit{limit} (ask for more memory)"


def signal_exit_code(code: int) -> int:
    """A container's ``128 + N`` exit after a signal, as the process runtime reports it: ``-N``."""
    return -(code - 128) if 128 < code < 160 else code


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


def container_environment(spec_env: Mapping[str, str]) -> dict[str, str]:
    """A container task's environment: nothing of the host, a PATH, the runner's code, then the job's.

    ``PYTHONPATH`` starts with the mounted runner code (see ``runner_code_mounts``) so an image
    needs only a Python to run shipped callables; the job's own ``PYTHONPATH`` follows it.
    """
    env = {"PATH": CONTAINER_PATH, "PYTHONUNBUFFERED": "1", "HOME": "/tmp"}
    env.update(spec_env)
    user_path = spec_env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{RUNNER_CODE_DIR}:{user_path}" if user_path else RUNNER_CODE_DIR
    return env


def runner_code_mounts(staged: str | None = None) -> list[tuple[str, str]]:
    """(host dir, container dir) pairs, read-only: the task runner's package and cloudpickle.

    The runner (``python -m worker_agent.task_runner``) imports only this package's
    ``task_runner``, ``blob_files`` and ``shipped_call`` modules, the standard library and
    cloudpickle, so mounting those lets any image with a matching Python run a shipped callable.
    ``staged`` is a copy the agent made where the engine's host can see it
    (``task_area.stage_runner_code``; needed when the agent itself runs in a container); without
    it, the packages are mounted from where this process imports them.
    """
    if staged is not None:
        return [(f"{staged}/{name}", f"{RUNNER_CODE_DIR}/{name}") for name in ("worker_agent", "cloudpickle")]
    import cloudpickle

    import worker_agent

    pairs = []
    for module in (worker_agent, cloudpickle):
        source = Path(module.__file__ or "").resolve().parent
        pairs.append((str(source), f"{RUNNER_CODE_DIR}/{source.name}"))
    return pairs


def default_python() -> str:
    """The interpreter running this agent, which also runs a process task's shipped callable."""
    return sys.executable
