"""Local worker processes: the one way Iris starts, finds and stops a process on this machine.

LocalPlatform starts its slice hosts with `start_worker` and the local cluster (`iris cluster
up`) its static workers; both find them again with `find_workers` and stop them with
`stop_processes`. The local cluster's dev server, controller and supervisor start and stop
through `start_process` and `stop_processes` too.

A pid alone is not an identity (pids are reused), so a process is known by its pid and its
start in clock ticks since boot (`LocalProcess`; never a wall-clock start time, which moves when the
system clock is set: `activities.process_start`) and only signalled while that still matches. Every process runs in
a session of its own, so stopping one stops its whole process group (a worker and the tasks
it spawned). A zombie counts as gone: nothing may reap it when the caller is PID 1.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
import structlog

from activities.process_start import start_ticks

log = structlog.get_logger("iris.platforms.local")

WORKER_ENV = "IRIS_LOCAL_WORKER"
"""Marks a local worker process with its worker id, so it is found again from the process table."""
HOME_ENV = "IRIS_HOME"
STOP_GRACE_SECONDS = 10.0

_GONE = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})
_POLL_SECONDS = 0.05
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}  # started by this process: reaped, so no zombies linger
# How the children this process reaped ended (their returncode), by pid: what a slice's describe says of a
# host that is gone. Bounded: only recent ends are asked about.
_EXITS: dict[int, int] = {}
_MAX_EXITS = 1024


@dataclass(frozen=True)
class LocalProcess:
    """A process Iris started on this machine: its pid and start ticks since boot (None: whatever runs at `pid`)."""

    pid: int
    started: int | None = None

    @classmethod
    def of(cls, pid: int) -> LocalProcess:
        """The process running at `pid` now, with its start time (None if there is none)."""
        found = _status(pid)
        return cls(pid, None if found is None else found[1])

    def alive(self) -> bool:
        """Whether it runs (not a zombie) and, when its start time is known, is still the same process."""
        reap(self.pid)
        try:
            os.kill(self.pid, 0)
        except (ProcessLookupError, PermissionError):  # another user's process: the pid was reused
            return False
        found = _status(self.pid)
        if found is None:
            return False
        state, started = found
        return state not in _GONE and (self.started is None or started == self.started)

    def owned(self) -> bool:
        """False when a *different* process now holds the pid (never signal its group)."""
        found = _status(self.pid)
        return found is None or self.started is None or found[1] == self.started or found[0] in _GONE

    def group_alive(self) -> bool:
        """Whether any live (non-zombie) process remains in the group it leads (the worker or its tasks)."""
        reap(self.pid)
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        leader = _status(self.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if leader is not None and leader[0] not in _GONE and os.getpgid(self.pid) == self.pid:
                return True  # the leader runs: no need to read the whole process table
        for proc in psutil.process_iter(["status"]):
            if proc.info["status"] in _GONE:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(proc.pid) == self.pid:
                    return True
        return False

    def signal_group(self, sig: int) -> None:
        """Send `sig` to the process group it leads, unless the pid now belongs to another process."""
        if self.owned():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)


def _status(pid: int) -> tuple[str, int] | None:
    """(psutil status, start ticks since boot) of `pid`, or None if there is no such process."""
    try:
        status = psutil.Process(pid).status()
    except psutil.Error:
        return None
    ticks = start_ticks(pid)
    return None if ticks is None else (status, ticks)


def reap(pid: int) -> None:
    """Collect `pid`'s exit status if it is our child, so an exited child is not kept as a zombie."""
    proc = _CHILDREN.get(pid)
    if proc is not None:
        _poll(pid, proc)
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _poll(pid: int, proc: subprocess.Popen[bytes]) -> None:
    code = proc.poll()
    if code is not None:
        del _CHILDREN[pid]
        _EXITS[pid] = code
        while len(_EXITS) > _MAX_EXITS:
            del _EXITS[next(iter(_EXITS))]


def _reap_all() -> None:
    for pid, proc in list(_CHILDREN.items()):
        _poll(pid, proc)


def how_it_ended(pid: int) -> str:
    """How a process this one started ended ("exit code 1", "killed by SIGKILL"); "" if it runs or is unknown
    (started by another process, e.g. before a controller restart)."""
    reap(pid)
    code = _EXITS.get(pid)
    if code is None:
        return ""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


START_LINE = re.compile(r"^=== \d{4}-\d\d-\d\d \d\d:\d\d:\d\d starting: .*$", re.MULTILINE)
"""The line a worker's log gets each time its process is started: the time and the command."""


def start_process(argv: Sequence[str], log_path: Path, env: Mapping[str, str]) -> LocalProcess:
    """Start a process detached (own session, stdin closed, output appended to `log_path`).

    The log and everything the process creates are private to the user (umask 077): a
    daemon's files hold job names, arguments and outputs.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as out:
        command = shlex.join(argv).replace("\n", "\\n")  # one line: START_LINE finds where its output begins
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {command}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=dict(env), umask=0o077,
        )  # fmt: skip
    _CHILDREN[proc.pid] = proc
    _EXITS.pop(proc.pid, None)  # an earlier process's end under the same pid
    return LocalProcess.of(proc.pid)


def worker_process_name(worker_id: str) -> str:
    """The process (and log file) name of a local worker, e.g. `worker-cpu-0`."""
    return f"worker-{worker_id}"


def worker_log_path(home: Path, worker_id: str) -> Path:
    """Where a local worker of the Iris in `home` writes its output."""
    return home / "logs" / f"{worker_process_name(worker_id)}.log"


def start_worker(
    argv: Sequence[str],
    *,
    home: Path,
    worker_id: str,
    env: Mapping[str, str],
    markers: Mapping[str, str] | None = None,
) -> LocalProcess:
    """Start one local worker (`argv` names `worker_id`), marked so `find_workers` finds it again.

    `markers` are more environment variables to find it by (a slice's id and host index).
    """
    marked = {**env, HOME_ENV: str(home), WORKER_ENV: worker_id, **(markers or {})}
    started = start_process(argv, worker_log_path(home, worker_id), marked)
    log.info("local_worker.started", worker_id=worker_id, pid=started.pid)
    return started


@dataclass(frozen=True)
class FoundWorker:
    """A running local worker found in the process table, with the environment it was started with."""

    process: LocalProcess
    env: Mapping[str, str]


def find_workers(home: Path) -> dict[str, FoundWorker]:
    """The live local workers of the Iris in `home` (static and slice hosts), by worker id.

    Only session leaders whose command line names their worker id count, so a task that inherited
    an agent's environment is never mistaken for the agent; another IRIS_HOME's workers (another
    local cluster on this machine) are never this one's.
    """
    _reap_all()
    found: dict[str, FoundWorker] = {}
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) != pid:
                continue
            # A fresh Process, not process_iter's cache: a cached one keeps the start time of whatever held
            # the pid before, and a worker that reuses it would be known by that (alive() False, never stopped).
            proc = psutil.Process(pid)
            env = proc.environ()
            worker_id = env.get(WORKER_ENV)
            if worker_id is None or env.get(HOME_ENV) != str(home) or worker_id not in proc.cmdline():
                continue
            with proc.oneshot():
                if proc.status() in _GONE:
                    continue
                found[worker_id] = FoundWorker(LocalProcess(proc.pid, start_ticks(proc.pid)), env)
        except (psutil.Error, OSError):
            continue
    return found


def wait_exited(processes: Mapping[str, LocalProcess], timeout: float) -> dict[str, LocalProcess]:
    """Wait up to `timeout` seconds for the processes' groups to exit; those still alive."""
    deadline = time.monotonic() + timeout
    live = {name: p for name, p in processes.items() if p.group_alive()}
    while live and time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
        live = {name: p for name, p in live.items() if p.group_alive()}
    return live


def kill_processes(processes: Mapping[str, LocalProcess]) -> None:
    """SIGKILL each process's group and wait for it to go: for a process whose graceful stop would only wait
    for clients that are already gone."""
    live = {name: p for name, p in processes.items() if p.owned() and p.group_alive()}
    for proc in live.values():
        proc.signal_group(signal.SIGKILL)
    if wait_exited(live, 5.0):
        log.error("local_process.unkillable", processes=sorted(live))


def stop_processes(processes: Mapping[str, LocalProcess], grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM each process's group, wait up to `grace` seconds, then SIGKILL what is left of it."""
    live = {name: p for name, p in processes.items() if p.owned() and p.group_alive()}
    for proc in live.values():
        proc.signal_group(signal.SIGTERM)
    live = wait_exited(live, grace)
    if live:
        log.warning("local_process.sigkill", processes=sorted(live), grace_seconds=grace)
        for proc in live.values():
            proc.signal_group(signal.SIGKILL)
        live = wait_exited(live, 5.0)
    if live:
        log.error("local_process.unkillable", processes=sorted(live))
