"""The process runtime: each task attempt is a host process in its own session and process group.

Kill semantics matter more than they look: an accelerator (a TPU chip, a GPU) stays locked while
any process of a dead task lingers, so a task runs in its own process group (its own session) and
killing it signals the whole group: SIGTERM, a grace period, then SIGKILL. When the task's main
process exits on its own, processes it left behind in its group are swept the same way. The job's
memory and cpu are enforced with one cgroup per attempt when the agent can write the cgroup
hierarchy (``cgroups.py``; root on a usual host); a task the kernel OOM-kills there is reported as
such, as the container runtimes report it. A process that calls ``setsid`` itself leaves the
process group but not the cgroup: when the attempt ends, however it ends, whatever is still in its
cgroup is SIGKILLed, then the cgroup goes. Where there is no cgroup (a task asking no memory or
cpu, a host without a writable hierarchy) the process-group sweep is all there is, and such a
process escapes it.

A restarted agent finds its predecessor's tasks through a ledger of process groups on disk
(``ProcessGroupLedger``) and kills them. On a shared host, tasks run as an unprivileged user
(``run_as``; ``iris worker serve`` picks ``nobody`` when the agent runs as root) so they cannot
read the agent's store; each task's own paths (``spec.mounts`` that are writable) are handed to
that user.

The agent must reap orphans it inherits: if it runs as PID 1 in a container, run it under an
init (``docker run --init``/tini), otherwise swept grandchildren stay zombies.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import structlog

from activities.process_start import start_ticks
from worker_agent.leases.lease_watchdog import FENCED_SUFFIX, read_lease
from worker_agent.process_table import group_members, group_usage
from worker_agent.runtimes.base import (
    DEFAULT_INHERITED_ENV,
    FinishedTasks,
    RecoveredTask,
    RuntimeName,
    TaskExit,
    TaskHandle,
    TaskSpec,
    TaskStartError,
    TaskStats,
    default_python,
    lease_expired_reason,
    oom_reason,
    task_environment,
)
from worker_agent.runtimes.cgroups import CgroupLimits, TaskCgroup
from worker_agent.runtimes.warm import ForkServer, ForkServerError, WarmProcess, runner_args

__all__ = [
    "LeaseWatchdog",
    "ProcessGroupLedger",
    "ProcessRuntime",
    "ProcessTask",
    "TaskUser",
    "process_group_alive",
]

logger = structlog.get_logger(__name__)

_POLL_SECONDS: Final = 0.02
_MAX_POLL_SECONDS: Final = 0.2
_REAP_SECONDS: Final = 1.0
_FORKSERVER_RETRY_SECONDS: Final = 60.0
_MAX_LEASE_TICK_SECONDS: Final = 0.5  # how often the watchdog looks at the leases, at most


def process_group_alive(pgid: int) -> bool:
    """Whether any non-zombie process remains in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(group_members(pgid))


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


def _unrunnable(spec: TaskSpec, env: Mapping[str, str], user: TaskUser | None = None) -> OSError | None:
    """Why exec would fail on the task's executable (as the error exec would raise), or None.

    With `user`, also whether that user (rather than the agent) may execute it.
    """
    executable = spec.argv[0]
    if os.sep in executable:
        path = Path(spec.cwd or ".", executable)
        if not path.is_file():
            return FileNotFoundError(errno.ENOENT, "not found", executable)
        if not os.access(path, os.X_OK):
            return PermissionError(errno.EACCES, "not executable", executable)
    else:
        found = shutil.which(executable, path=env.get("PATH", os.defpath))
        if not found:
            return FileNotFoundError(errno.ENOENT, "not found", executable)
        path = Path(found)
    if user is not None and not _executable_by(path, user):
        return PermissionError(errno.EACCES, "not executable", executable)
    return None


def _executable_by(path: Path, user: TaskUser) -> bool:
    """Whether `user` (its own group only, as tasks run) has the execute bit on `path`."""
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_uid == user.uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == user.gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


class MainProcess(Protocol):
    """A task's main process as the runtime follows it: a child of the agent or of its forkserver."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


class ProcessTask:
    """A task running as a host process that leads its own process group."""

    def __init__(self, process: MainProcess, straggler_grace_seconds: float, started: float) -> None:
        self._process = process
        self._started = started  # time.monotonic() once the process was there (exec'd, or forked warm)
        self._exited: float | None = None  # and once its exit was seen
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

    @property
    def main_exited(self) -> bool:
        """Whether the main process has been reaped (the task is ending: its group and cgroup are swept next)."""
        return self._process.returncode is not None

    @property
    def ran_seconds(self) -> float | None:
        """From the main process's start to its exit (None while it runs): what the attempt is charged for,
        without the agent's own work around the start (the cgroup, the spawn), ~10-25 ms under load."""
        return None if self._exited is None else self._exited - self._started

    def _seen_exit(self) -> None:
        if self._exited is None:
            self._exited = time.monotonic()

    def is_running(self) -> bool:
        """Whether the main process or anything left in its process group is alive."""
        return self._process.returncode is None or self._alive()

    async def wait(self) -> int:
        """Wait for the main process to exit, then sweep what it left behind in its group."""
        code = await self._process.wait()
        self._seen_exit()
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
            self._seen_exit()
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


class ProcessGroupLedger:
    """Records the process groups of running tasks on disk, so a restarted agent can kill them.

    If the agent is SIGKILLed its tasks live on in their own sessions; the next agent start
    with the same directory kills them, so a task never runs twice on one host after a
    restart. Each entry holds its leader's start (ticks since boot), so a group number reused by an
    unrelated process is never signalled. (The agent's lock on its state directory keeps a
    second live agent with the same worker id away from these entries.)

    An entry also holds the attempt's lease deadline (``lease_watchdog`` reads and enforces it):
    entries are replaced whole (write, then rename), so the watchdog never reads half of one.
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._started: dict[int, str] = {}  # pgid -> the leader's start ticks as written ("" if it was gone)
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def add(self, pgid: int, deadline: float = 0.0) -> None:
        if self.directory is not None:
            ticks = start_ticks(pgid)
            self._started[pgid] = "" if ticks is None else str(ticks)
            self._write(pgid, deadline)

    def renew(self, pgid: int, deadline: float) -> None:
        """Move the lease deadline of `pgid`'s entry (on ``lease_clock()``); nothing if it is not recorded."""
        if self.directory is not None and pgid in self._started:
            self._write(pgid, deadline)

    def fenced(self, pgid: int) -> bool:
        """Whether the lease watchdog killed `pgid` because its lease expired."""
        return self.directory is not None and (self.directory / f"{pgid}{FENCED_SUFFIX}").exists()

    def _write(self, pgid: int, deadline: float) -> None:
        assert self.directory is not None
        temporary = self.directory / f".{pgid}.tmp"
        temporary.write_text(f"\n{deadline!r}\n{self._started[pgid]}\n")  # the first line is no longer used
        temporary.replace(self.directory / str(pgid))

    def remove(self, pgid: int) -> None:
        self._started.pop(pgid, None)
        if self.directory is not None:
            (self.directory / str(pgid)).unlink(missing_ok=True)
            (self.directory / f"{pgid}{FENCED_SUFFIX}").unlink(missing_ok=True)

    def kill_leftovers(self) -> list[int]:
        """SIGKILL the recorded groups of a dead agent's tasks; the groups killed."""
        killed: list[int] = []
        if self.directory is None:
            return killed
        for entry in self.directory.iterdir():
            if entry.is_dir():
                continue
            if entry.name.isdigit():
                pgid = int(entry.name)
                lease = read_lease(entry)
                recorded, ticks = (None if lease is None else lease.ticks), start_ticks(pgid)
                # A live leader with another start is a new process that reused the number.
                # A dead leader is fine: a pgid is never reused while its group has members.
                if recorded is not None and ticks is not None and ticks != recorded:
                    entry.unlink(missing_ok=True)
                    continue
                try:
                    os.killpg(pgid, signal.SIGKILL)
                    killed.append(pgid)
                except (ProcessLookupError, PermissionError):
                    pass
            entry.unlink(missing_ok=True)
        return killed


class LeaseWatchdog:
    """The ``lease_watchdog`` process enforcing the leases of one ledger: started once, again if it dies.

    It runs in a session of its own, so nothing that freezes or signals the agent's process group
    reaches it; its stdin is a pipe this agent holds, whose end tells it the agent is gone.
    """

    def __init__(self, directory: Path, tick: float) -> None:
        self.directory = directory
        self.tick = tick
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The watchdog's pid while it runs, else None."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def ensure(self) -> None:
        """Start the watchdog unless it runs (a watchdog that died is replaced, and says so)."""
        process = self._process
        if process is not None and process.poll() is None:
            return
        if process is not None:
            logger.error("lease_watchdog_died", exit_code=process.returncode)
        self._process = subprocess.Popen(
            [default_python(), "-m", "worker_agent.leases.lease_watchdog", str(self.directory), repr(self.tick)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip

    def close(self) -> None:
        """Let go of the watchdog: it enforces what is left and exits once no leased group remains."""
        process, self._process = self._process, None
        if process is not None and process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()


@dataclass(frozen=True)
class TaskUser:
    """The unprivileged account tasks run as: its name, uid, gid and home."""

    name: str
    uid: int
    gid: int

    @classmethod
    def lookup(cls, name: str) -> TaskUser:
        """The account called ``name``; ValueError naming it if there is no such user."""
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise ValueError(f"task user {name!r} does not exist on this host") from None
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid)


class ProcessRuntime:
    """Runs each task as a fresh host subprocess in its own session and process group.

    stdin is /dev/null; stdout and stderr both go to the spec's log file; the environment is
    ``task_environment(spec.env, inherit_env)``. ``spec.image`` is ignored (logged), so jobs
    that name an image still run on a process-only local cluster. With ``run_as``, the task
    runs as that user, its writable mounts are handed to it and its ``HOME`` is its cwd.
    The handle is the task's process-group id.

    A shipped callable (``python -m worker_agent.task_runner ...`` under this runtime's
    interpreter) is forked from a warm interpreter (``forkserver.py``) when one is ready and the
    task's start-up environment agrees with it (``warm=False``: never); it runs the same, but its
    function starts within milliseconds instead of after a fresh interpreter's start-up, which a
    small CPU limit stretches to most of a second. The first callables start fresh while the
    forkserver gets ready (``recover``, the agent's first call, starts it).
    """

    def __init__(
        self,
        *,
        inherit_env: Iterable[str] = DEFAULT_INHERITED_ENV,
        straggler_grace_seconds: float = 2.0,
        ledger_dir: Path | None = None,
        run_as: TaskUser | None = None,
        limits: bool = True,
        warm: bool = True,
        lease_seconds: float | None = None,
    ) -> None:
        if straggler_grace_seconds < 0:
            raise ValueError(f"straggler_grace_seconds must be >= 0, got {straggler_grace_seconds}")
        if lease_seconds is not None and not lease_seconds > 0:
            raise ValueError(f"lease_seconds must be > 0, got {lease_seconds}")
        self._inherit_env = tuple(inherit_env)
        self._straggler_grace = straggler_grace_seconds
        if lease_seconds is not None and ledger_dir is None:
            ledger_dir = Path(tempfile.mkdtemp(prefix="iris-leases-"))  # the watchdog needs entries to read
        self._ledger = ProcessGroupLedger(ledger_dir)
        # With a lease, every task's group dies when the agent stops renewing it (lease_watchdog).
        self._watchdog = (
            None if lease_seconds is None or ledger_dir is None
            else LeaseWatchdog(ledger_dir, min(_MAX_LEASE_TICK_SECONDS, lease_seconds / 10))
        )  # fmt: skip
        self._run_as = run_as
        # Switching to the task user in the exec chain rather than in Popen lets Python start the
        # process with vfork: measured 1.6 ms instead of 9.8 ms a start from a 150 MB process (fork
        # copies the agent's page tables). Popen switches when the host has no `setpriv`.
        self._setpriv = shutil.which("setpriv") if run_as is not None else None
        self._tasks: dict[TaskHandle, ProcessTask] = {}
        self._finished = FinishedTasks()
        # The job's memory/cpu become a cgroup per attempt when this agent may create them.
        self._limits = CgroupLimits.detect() if limits else None
        self._groups: dict[TaskHandle, tuple[TaskCgroup, int]] = {}
        self._said_unlimited = False
        self._warm = warm
        self._forkserver: ForkServer | None = None
        self._forkserver_starting: asyncio.Task[None] | None = None
        self._forkserver_retry_at = 0.0

    @property
    def name(self) -> RuntimeName:
        """Always ``process``."""
        return RuntimeName.PROCESS

    @property
    def python(self) -> str:
        """The agent's own interpreter runs shipped callables."""
        return default_python()

    @property
    def leases(self) -> bool:
        """Whether tasks are fenced: their groups die when the agent stops renewing their leases."""
        return self._watchdog is not None

    @property
    def lease_watchdog_pid(self) -> int | None:
        """The pid of the running lease watchdog, or None."""
        return None if self._watchdog is None else self._watchdog.pid

    def renew(self, handle: TaskHandle, deadline: float) -> None:
        """Move the lease of ``handle``'s task to ``deadline`` (on ``lease_clock()``); after it, it is killed."""
        if self._watchdog is None or handle not in self._tasks:
            return
        self._ledger.renew(int(handle), deadline)
        self._watchdog.ensure()

    @property
    def run_as(self) -> TaskUser | None:
        """The user tasks run as (None: the agent's own user)."""
        return self._run_as

    def main_ended(self, handle: TaskHandle) -> bool:
        """Whether ``handle``'s main process has exited (or the task is forgotten). `wait` and `kill` reap it
        before they sweep the task's cgroup, so a command run in that cgroup (`iris task exec`) that the sweep
        killed finds it True; one killed while it is False died of something else."""
        task = self._tasks.get(handle)
        return task is None or task.main_exited

    def task(self, handle: TaskHandle) -> ProcessTask:
        """The process behind ``handle``; KeyError if this runtime did not start it or forgot it."""
        return self._tasks[handle]

    async def start(self, spec: TaskSpec) -> TaskHandle:
        """Start the process; raise TaskStartError with a user-facing reason if it cannot start."""
        if spec.image is not None:
            logger.info("process runtime ignores the task image", image=spec.image)
        env = task_environment(spec.env, self._inherit_env)
        user = self._run_as
        if user is not None:
            for mount in spec.mounts:
                if not mount.read_only:
                    _hand_over(Path(mount.path), user)
            env.update({"USER": user.name, "LOGNAME": user.name, "HOME": spec.cwd or "/"})
        if self._watchdog is not None:
            self._watchdog.ensure()  # enforcing before the task runs, not after
        group = self._new_group(spec)
        args = runner_args(spec.argv, self.python) if self._warm else None
        server = self._ready_forkserver(env) if args is not None else None
        process: MainProcess | None = None
        if server is not None and args is not None:
            try:
                process = await server.launch(
                    args=args, env=env, cwd=spec.cwd or str(Path.cwd()), log=spec.log,
                    uid=None if user is None else user.uid, gid=None if user is None else user.gid,
                    cgroups=[] if group is None else group.procs_files(),
                )  # fmt: skip
            except ForkServerError as exc:  # it never got the request: start the task fresh
                logger.warning("forkserver_unusable", error=str(exc))
                server = None
            except TaskStartError as exc:
                if group is not None:
                    oom = group.oom_kills() > 0  # its first pages passed the limit: say so, not only "killed"
                    group.remove()
                    if oom:
                        raise TaskStartError(f"cannot start task: {oom_reason(spec.memory_bytes)}") from exc
                raise
        if process is None:
            process = await self._exec(spec, env, user, group)
        started = time.monotonic()  # the task's program runs (exec'd, or forked warm): what follows is the agent's
        handle = TaskHandle(str(process.pid))
        if group is not None and isinstance(process, WarmProcess) and process.joined:
            self._groups[handle] = (group, spec.memory_bytes)  # the forked child is in it already
        elif group is not None:
            self._limit(handle, process.pid, group, spec)
        self._ledger.add(process.pid, spec.lease_deadline if self._watchdog is not None else 0.0)
        self._tasks[handle] = ProcessTask(process, self._straggler_grace, started)
        program = spec.argv[0] if spec.argv else ""  # never the whole argv: it may carry a secret
        logger.debug("task started", pid=process.pid, program=program, forked=server is not None)
        return handle

    async def _exec(
        self, spec: TaskSpec, env: dict[str, str], user: TaskUser | None, group: TaskCgroup | None
    ) -> asyncio.subprocess.Process:
        """Start the task as a fresh process: the cgroup's shell, then setpriv, then the command."""
        executable = spec.argv[0]
        argv = list(spec.argv)
        setpriv = self._setpriv  # only set when tasks run as another user
        if user is not None and setpriv is not None:
            argv = [setpriv, f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--", *argv]
        switch = None if setpriv is not None else user  # the user Popen switches to, if it must
        if group is not None or setpriv is not None:
            missing = _unrunnable(spec, env, user if setpriv else None)  # behind a wrapper: exit 126/127
            if missing is not None:
                if group is not None:
                    group.remove()
                raise TaskStartError(_start_failure(spec, missing))
        if group is not None:
            argv = group.joined(argv)
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=spec.log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=spec.cwd,
                start_new_session=True,
                user=None if switch is None else switch.uid,
                group=None if switch is None else switch.gid,
                extra_groups=None if switch is None else [],
            )
        except OSError as exc:
            if group is not None:
                group.remove()
            raise TaskStartError(_start_failure(spec, exc)) from exc
        except (ValueError, subprocess.SubprocessError) as exc:
            if group is not None:
                group.remove()
            raise TaskStartError(f"cannot start task {executable!r}: {exc}") from exc

    def _ready_forkserver(self, env: dict[str, str]) -> ForkServer | None:
        """The forkserver if it is ready for a task with ``env``; otherwise None, and one is started."""
        server = self._forkserver
        if server is not None and server.alive:
            return server if server.matches(env) else None
        self.prepare()
        return None

    def prepare(self) -> None:
        """Start the forkserver in the background unless it runs, is starting, or failed a moment ago."""
        if not self._warm or (self._forkserver is not None and self._forkserver.alive):
            return
        if self._forkserver_starting is not None and not self._forkserver_starting.done():
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._forkserver_retry_at:
            return
        self._forkserver_starting = loop.create_task(self._start_forkserver())

    async def warm_up(self) -> bool:
        """Start the forkserver and wait until it is ready; whether callables now start warm."""
        self.prepare()
        if self._forkserver_starting is not None:
            await asyncio.shield(self._forkserver_starting)
        return self._forkserver is not None and self._forkserver.alive

    @property
    def forkserver_pid(self) -> int | None:
        """The pid of the ready forkserver (the parent of warm-started tasks), or None."""
        server = self._forkserver
        return server.pid if server is not None and server.alive else None

    async def _start_forkserver(self) -> None:
        env = task_environment({}, self._inherit_env)
        try:
            self._forkserver = await ForkServer.start(self.python, env)
        except ForkServerError as exc:
            self._forkserver_retry_at = asyncio.get_running_loop().time() + _FORKSERVER_RETRY_SECONDS
            logger.warning("forkserver_unavailable", error=str(exc), retry_in=_FORKSERVER_RETRY_SECONDS)

    async def wait(self, handle: TaskHandle) -> TaskExit:
        """Wait for the main process, sweep its group, and forget it."""
        task = self._tasks.get(handle)
        if task is None:
            return self._known_exit(handle)
        code = await task.wait()
        await self._empty_cgroup(handle)
        return self._finished.record(handle, self._exit(handle, code))

    async def kill(self, handle: TaskHandle, grace_seconds: float = 10.0) -> TaskExit:
        """SIGTERM the group, SIGKILL after ``grace_seconds``; idempotent while the handle is known."""
        task = self._tasks.get(handle)
        if task is None:
            return self._known_exit(handle)
        code = await task.kill(grace_seconds)
        await self._empty_cgroup(handle)
        return self._finished.record(handle, self._exit(handle, code))

    async def _empty_cgroup(self, handle: TaskHandle) -> None:
        """SIGKILL what the attempt left in its cgroup outside its process group (`setsid`), so the group can go."""
        limited = self._groups.get(handle)
        if limited is not None:
            await asyncio.to_thread(limited[0].kill_all)

    async def stats(self, handle: TaskHandle) -> TaskStats | None:
        """Memory (resident) and CPU time of the group's live processes; the peak of its cgroup, if it has one."""
        task = self._tasks.get(handle)
        if task is None or not task.is_running():
            return None
        stats = await asyncio.to_thread(_group_stats, task.pgid)  # a walk of the process table
        limited = self._groups.get(handle)
        if limited is not None:
            peak, cpu = limited[0].usage()
            stats = TaskStats(max(stats.memory_bytes, peak or 0), max(stats.cpu_seconds, cpu or 0.0))
        return stats

    async def recover(self) -> list[RecoveredTask]:
        """SIGKILL the process groups an earlier agent recorded in the ledger; drop its empty cgroups.

        The agent calls this once before it takes tasks, so the forkserver starts here too.
        """
        killed = [
            RecoveredTask(TaskHandle(str(pgid)), job_id="", task_id="", action="killed")
            for pgid in self._ledger.kill_leftovers()
        ]
        if self._limits is not None:
            self._limits.remove_stale()
        if self._watchdog is not None:
            self._watchdog.ensure()
        self.prepare()
        return killed

    def _new_group(self, spec: TaskSpec) -> TaskCgroup | None:
        """A cgroup with the job's memory and cpu for the next task, when it asks and this host allows it."""
        if not (spec.memory_bytes or spec.cpu_millis):
            return None
        if self._limits is None:
            if not self._said_unlimited:
                self._said_unlimited = True
                logger.warning("process_limits_not_enforced", why="no writable cgroup hierarchy on this host")
            return None
        try:
            return self._limits.create(f"task-{uuid.uuid4().hex}", spec.memory_bytes, spec.cpu_millis)
        except OSError as exc:
            logger.warning("process_limits_not_enforced", error=str(exc))
            return None

    def _limit(self, handle: TaskHandle, pid: int, group: TaskCgroup, spec: TaskSpec) -> None:
        """Make sure the started process is in its group (it joined before exec, unless it could not)."""
        try:
            group.add(pid)
        except ProcessLookupError:
            pass  # already exited (a quick task): it joined before exec, so its group still tells an OOM kill
        except OSError as exc:
            logger.warning("process_limits_not_enforced", pid=pid, error=str(exc))
            group.remove()
            return
        self._groups[handle] = (group, spec.memory_bytes)

    def _exit(self, handle: TaskHandle, code: int) -> TaskExit:
        """The exit, saying so when the lease watchdog or the kernel's OOM killer killed the task; the
        task is forgotten and its cgroup goes."""
        task = self._tasks.get(handle)
        ran = None if task is None else task.ran_seconds
        fenced = task is not None and self._ledger.fenced(int(handle))
        self._forget(handle)
        limited = self._groups.pop(handle, None)
        if fenced:
            if limited is not None:
                limited[0].remove()
            return TaskExit(code, lease_expired_reason(), fenced=True, ran_seconds=ran)
        if limited is None:
            return TaskExit(code, ran_seconds=ran)
        group, memory_bytes = limited
        oom = code != 0 and group.oom_kills() > 0
        peak, cpu = group.usage()
        used = TaskStats(memory_bytes=peak, cpu_seconds=cpu or 0.0) if peak is not None else None
        group.remove()
        if oom:
            return TaskExit(code, oom_reason(memory_bytes), oom_killed=True, usage=used, ran_seconds=ran)
        return TaskExit(code, usage=used, ran_seconds=ran)

    async def close(self) -> None:
        """Stop the forkserver (tasks it started run on, as the agent's own children do) and let go of
        the lease watchdog (it enforces the leases left, then exits)."""
        if self._watchdog is not None:
            self._watchdog.close()
        starting, self._forkserver_starting = self._forkserver_starting, None
        if starting is not None and not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
        server, self._forkserver = self._forkserver, None
        if server is not None:
            await server.close()

    def _known_exit(self, handle: TaskHandle) -> TaskExit:
        exit = self._finished.get(handle)
        if exit is None:
            raise KeyError(f"no task {handle} in this process runtime")
        return exit

    def _forget(self, handle: TaskHandle) -> None:
        if self._tasks.pop(handle, None) is not None:
            self._ledger.remove(int(handle))


def _group_stats(pgid: int) -> TaskStats:
    """Resident memory and CPU time summed over the live members of group ``pgid``."""
    memory, cpu = group_usage(pgid)
    return TaskStats(memory_bytes=memory, cpu_seconds=cpu)


def _hand_over(path: Path, user: TaskUser) -> None:
    """Give ``path`` and everything under it to ``user`` (the task's own writable area)."""
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(Path(root) / name, user.uid, user.gid)
    os.chown(path, user.uid, user.gid)
