"""The process table through psutil: a process's identity, a process group's live members and their usage.

Why: a pid alone is not an identity (pids are reused), so a process is known by its pid and its
start time; a zombie counts as gone, since nothing may reap it when the caller is PID 1.
"""

from __future__ import annotations

import contextlib
import os

import psutil

__all__ = ["GONE", "group_members", "group_usage", "start_time", "status"]

GONE = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})


def status(pid: int) -> tuple[str, float] | None:
    """(psutil status, start time) of `pid`, or None if there is no such process."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            return process.status(), process.create_time()
    except psutil.NoSuchProcess:
        return None


def start_time(pid: int) -> float | None:
    """When `pid` started (seconds since the epoch), or None if it is gone or a zombie."""
    found = status(pid)
    return None if found is None or found[0] in GONE else found[1]


def group_members(pgid: int) -> list[int]:
    """The live (non-zombie) processes in process group `pgid`."""
    members = []
    for process in psutil.process_iter(["status"]):
        if process.info["status"] in GONE:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(process.pid) == pgid:
                members.append(process.pid)
    return members


def group_usage(pgid: int) -> tuple[int, float]:
    """(resident bytes, CPU seconds) summed over the live members of group `pgid`.

    CPU seconds include those of members' children that ended and were waited for (a shell's
    finished commands), which the kernel adds to their parent's account.
    """
    memory, cpu = 0, 0.0
    for pid in group_members(pgid):
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            with process.oneshot():
                times = process.cpu_times()
                cpu += times.user + times.system + times.children_user + times.children_system
                memory += process.memory_info().rss
    return memory, cpu
