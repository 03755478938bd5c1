"""The host the bench runs on: CPU seconds per process and for the machine, and what the figures depend on.

CPU is read from /proc (Linux only; elsewhere the readings are simply absent), so a
throughput run can say what it cost the dev server, the controller and the agents.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import temporalio

from iris.local.cluster import temporal_binary


def process_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system, including reaped children such as task processes) of `pid`; Linux only."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # from field 3 (state) on
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine since boot, summed over cores; Linux only."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    values = [int(x) for x in first[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(values[:8]) - idle) / tick, sum(values[:8]) / tick


class CpuMeter:
    """CPU seconds used by named processes (and by the whole machine) between `start` and `stop`."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self._before: dict[str, float | None] = {}
        self._machine: tuple[float, float] | None = None
        self._wall = 0.0
        self.used: dict[str, float] = {}
        """Per process; `machine busy` is every process on the host (other users' included)."""

    def start(self) -> None:
        """Take the first reading."""
        self._before = {name: process_cpu_seconds(pid) for name, pid in self.pids.items()}
        self._machine = machine_cpu_seconds()
        self._wall = time.monotonic()

    def stop(self) -> dict[str, float]:
        """Take the second reading; CPU seconds per process, plus `machine busy` and `wall`."""
        used: dict[str, float] = {}
        for name, pid in self.pids.items():
            before, after = self._before.get(name), process_cpu_seconds(pid)
            if before is not None and after is not None:
                used[name] = round(after - before, 2)
        machine = machine_cpu_seconds()
        if machine is not None and self._machine is not None:
            used["machine busy"] = round(machine[0] - self._machine[0], 2)
        used["wall"] = round(time.monotonic() - self._wall, 2)
        self.used = used
        return used


def _git(root: Path, *args: str) -> str:
    """The output of one `git -C root ...` call; raises when git is missing or fails."""
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True
    ).stdout


def code_version() -> str:
    """The commit of the code under test and how many files differ from it (other edits run too)."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = _git(root, "rev-parse", "--short", "HEAD").strip()
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no").splitlines()
    except (OSError, subprocess.SubprocessError):
        return f"{root} (not a git checkout)"
    return f"{root} at {head}" + (f" + {len(dirty)} modified files" if dirty else "")


def machine_info() -> dict[str, Any]:
    """What the figures depend on: cores, load, versions, the code under test."""
    try:
        cli = subprocess.run(
            [str(temporal_binary()), "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as err:
        cli = f"unknown ({err})"
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "temporalio": temporalio.__version__,
        "temporal_cli": cli,
        "code": code_version(),
    }
