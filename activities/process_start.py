"""When a process started, as the kernel counts it: clock ticks since boot (``/proc/PID/stat``, field 22).

Why not psutil's ``create_time()``: it adds the boot time ``/proc/stat`` reports, and that moves whenever
the system clock is set (NTP, a VM's clock brought back after a pause). Every process then seems to have
started at another time, all at once, and a recorded identity (pid, start time) says live processes are
gone: a whole local cluster was seen "not running", then started a second time beside itself. Ticks
since boot never change for a process. Standard library only: the lease watchdog imports this.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["start_ticks"]


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None
