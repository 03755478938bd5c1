"""The process table through psutil: a process's state, a process group's live members and their usage.

A zombie counts as gone, since nothing may reap it when the caller is PID 1. (A process's identity,
its pid and start, is `activities.process_start.start_ticks`.)
"""

from __future__ import annotations

import contextlib
import os

import psutil

__all__ = ["GONE", "group_members", "group_usage", "status"]

GONE = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})


def status(pid: int) -> str | None:
    """The psutil status of `pid`, or None if there is no such process."""
    try:
        return psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return None


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
