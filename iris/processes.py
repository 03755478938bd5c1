"""The process table, for the local cluster: spawn detached processes, and find and stop them safely.

A pid alone is not an identity (pids are reused), so processes are recorded
with their start time (psutil) and only signalled while that still matches.
Processes run in their own sessions, so whole groups are stopped, and zombies
count as dead because nothing may reap them when the caller is PID 1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Mapping
from pathlib import Path

import structlog

from activities.platforms.local import reap_child, spawn_worker
from worker_agent.process_table import GONE, status
from worker_agent.runtimes.process import process_group_alive

log = structlog.get_logger("iris.local_cluster")

_POLL_SECONDS = 0.05
_HOST = "127.0.0.1"


spawn = spawn_worker  # the local platform's: one way to start a local process


def reap(pid: int) -> None:
    """Collect `pid`'s exit status if it is our child, so an exited child is not kept as a zombie."""
    if reap_child(pid):
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def pid_alive(pid: int, ticks: float | None = None) -> bool:
    """Whether `pid` runs (not a zombie) and, when `ticks` is known, is the same process we started."""
    reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process: the pid was reused, ours is gone
    found = status(pid)
    if found is None:
        return False
    state, started = found
    return state not in GONE and (ticks is None or started == ticks)


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process remains in process group `pgid` (reaping our own child first)."""
    reap(pgid)
    return process_group_alive(pgid)


def owned(pid: int, ticks: float | None) -> bool:
    """False when a *different* process now holds `pid` (never signal its group)."""
    found = status(pid)
    return found is None or ticks is None or found[1] == ticks or found[0] in GONE


def signal_group(pid: int, sig: int, ticks: float | None) -> None:
    """Send `sig` to the process group led by our process `pid` (the worker and its tasks)."""
    if not owned(pid, ticks):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def wait_groups(
    groups: Mapping[str, tuple[int, float | None]], timeout: float
) -> dict[str, tuple[int, float | None]]:
    """Wait up to `timeout` seconds for the groups to exit; those still alive."""
    deadline = time.monotonic() + timeout
    live = {name: e for name, e in groups.items() if group_alive(e[0])}
    while live and time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
        live = {name: e for name, e in live.items() if group_alive(e[0])}
    return live


def stop_groups(groups: Mapping[str, tuple[int, float | None]], grace: float) -> None:
    """SIGTERM each (pid, start ticks) group, wait up to `grace` seconds, then SIGKILL what is left."""
    live = {name: e for name, e in groups.items() if owned(*e) and group_alive(e[0])}
    for pid, ticks in live.values():
        signal_group(pid, signal.SIGTERM, ticks)
    live = wait_groups(live, grace)
    if live:
        log.warning("local_cluster.sigkill", processes=sorted(live), grace_seconds=grace)
        for pid, ticks in live.values():
            signal_group(pid, signal.SIGKILL, ticks)
        live = wait_groups(live, 5.0)
    if live:
        log.error("local_cluster.unkillable", processes=sorted(live))


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on the loopback `port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((_HOST, port)) == 0


def port_free(port: int) -> bool:
    """Whether the loopback `port` can be bound now by a server that reuses the address.

    A port its last server left in TIME_WAIT (killed with connections open) is free: the dev
    server binds with SO_REUSEADDR, as Go's listeners do, so a restart keeps its address.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((_HOST, port))
        except OSError:
            return False
        return True


def log_since(path: Path, offset: int, limit: int | None = 2000) -> str:
    """The end of what `path` gained after `offset` (this start's output, not earlier runs'); all of it
    with `limit` None."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return (text if limit is None else text[-limit:]).strip()


def crash_excerpt(output: str, limit: int = 2000) -> str:
    """What a process's output says of why it failed: a Go panic's message without its goroutine dump
    (the dev server panics after a failed listen, and the dump pushes the reason out of any tail)."""
    cause = output.split("\ngoroutine ", 1)[0] if "\npanic: " in f"\n{output}" else output
    return cause[-limit:].strip()
