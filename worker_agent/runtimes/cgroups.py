"""Memory and CPU limits for host processes, through the kernel's cgroups (v1 or v2).

The container runtimes get limits from their engine; a plain process gets them
here: one cgroup per task attempt under ``iris/`` in the memory and cpu
hierarchies (v1) or the unified one (v2). The kernel enforces them exactly as it
does for a container (memory: the OOM killer inside the group, no swap; cpu: a
CFS quota), and the group's ``oom_kill`` counter says afterwards whether a task
that died of SIGKILL was OOM-killed, so the failure is reported as such.

Only an agent that can write the hierarchy (root, a writable cgroupfs) gets
limits; otherwise ``CgroupLimits.detect`` returns None and the agent says once
that the process runtime cannot enforce limits on this host.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

logger = structlog.get_logger(__name__)

ROOT = Path("/sys/fs/cgroup")
PARENT = "iris"  # every task's group lives under this one, so leftovers are easy to find
CFS_PERIOD_US = 100_000
# `sh -c` script: write the shell's pid ($$) to the two cgroup.procs paths given first, then exec the rest.
JOIN_THEN_EXEC = '{ echo $$ >"$1"; } 2>/dev/null; { echo $$ >"$2"; } 2>/dev/null; shift 2; exec "$@"'
STALE_SECONDS = 60.0  # an empty task group older than this is a leftover of a dead agent


@dataclass(frozen=True)
class TaskCgroup:
    """The cgroup directories of one task attempt (one per v1 hierarchy, or one v2 directory)."""

    name: str
    memory_dir: Path | None
    cpu_dir: Path | None
    unified: bool

    def add(self, pid: int) -> None:
        """Move ``pid`` (the task's main process, before it forks) into the group."""
        for directory in {d for d in (self.memory_dir, self.cpu_dir) if d is not None}:
            (directory / "cgroup.procs").write_text(str(pid))

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid to, to join the group."""
        return [str(d / "cgroup.procs") for d in {self.memory_dir, self.cpu_dir} if d is not None]

    def joined(self, argv: Sequence[str]) -> list[str]:
        """`argv` behind a shell that moves itself into the group, then execs the task (same pid).

        Moved after the start instead, a quick task ran (and allocated) outside its limits for a
        moment. A `preexec_fn` did this in the forked child until it deadlocked there once in
        ~5,000 starts (a forked child of a threaded process must not run Python), freezing the
        agent's event loop inside `Popen`. Best effort: the agent moves the process again after
        the start in any case.
        """
        paths = self.procs_files()
        paths += ["/dev/null"] * (2 - len(paths))
        return ["/bin/sh", "-c", JOIN_THEN_EXEC, "iris-join", *paths, *argv]

    def oom_kills(self) -> int:
        """How many processes of the group the kernel OOM-killed."""
        if self.memory_dir is None:
            return 0
        events = self.memory_dir / ("memory.events" if self.unified else "memory.oom_control")
        with contextlib.suppress(OSError, ValueError):
            for line in events.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def usage(self) -> tuple[int | None, float | None]:
        """(peak memory bytes, CPU seconds) as the kernel accounts the group; None where it cannot tell.

        The peak is the group's high-water mark (`memory.peak` in v2, `memory.max_usage_in_bytes` in
        v1: page cache included), so it holds even what the task used in its last moment. CPU time is
        only in v2's `cpu.stat` (v1 keeps it in the cpuacct hierarchy, which tasks are not put in).
        """
        peak: int | None = None
        cpu: float | None = None
        if self.memory_dir is not None:
            name = "memory.peak" if self.unified else "memory.max_usage_in_bytes"
            with contextlib.suppress(OSError, ValueError):
                peak = int((self.memory_dir / name).read_text().strip())
        if self.unified and self.cpu_dir is not None:
            with contextlib.suppress(OSError, ValueError):
                for line in (self.cpu_dir / "cpu.stat").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        cpu = int(value) / 1e6
        return peak, cpu

    def remove(self) -> None:
        """Delete the group's directories (the kernel refuses while a process is still in it)."""
        for directory in {d for d in (self.memory_dir, self.cpu_dir) if d is not None}:
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.warning("cgroup_not_removed", path=str(directory), error=str(exc))


class CgroupLimits:
    """Creates per-task cgroups with a memory and cpu limit; ``detect()`` finds a usable hierarchy."""

    def __init__(self, memory_root: Path | None, cpu_root: Path | None, unified: bool) -> None:
        self.memory_root = memory_root
        self.cpu_root = cpu_root
        self.unified = unified

    @classmethod
    def detect(cls, root: Path = ROOT) -> CgroupLimits | None:
        """The hierarchies this agent may write, or None (not root, read-only or no cgroupfs)."""
        try:
            if (root / "cgroup.controllers").is_file():  # v2: one unified tree
                controllers = (root / "cgroup.controllers").read_text().split()
                parent = root / PARENT
                parent.mkdir(exist_ok=True)
                wanted = [c for c in ("memory", "cpu") if c in controllers]
                for c in wanted:  # let the task groups below use the controllers
                    with contextlib.suppress(OSError):
                        (root / "cgroup.subtree_control").write_text(f"+{c}")
                    (parent / "cgroup.subtree_control").write_text(f"+{c}")
                memory = parent if "memory" in wanted else None
                cpu = parent if "cpu" in wanted else None
                return cls(memory, cpu, unified=True) if memory or cpu else None
            memory_root = cls._v1_parent(root / "memory")
            cpu_root = cls._v1_parent(root / "cpu") or cls._v1_parent(root / "cpu,cpuacct")
            if memory_root is None and cpu_root is None:
                return None
            return cls(memory_root, cpu_root, unified=False)
        except OSError as exc:
            logger.info("cgroups_unavailable", error=str(exc))
            return None

    @staticmethod
    def _v1_parent(hierarchy: Path) -> Path | None:
        if not (hierarchy / "cgroup.procs").is_file() or not os.access(hierarchy, os.W_OK):
            return None
        parent = hierarchy / PARENT
        parent.mkdir(exist_ok=True)
        return parent

    def create(self, name: str, memory_bytes: int, cpu_millis: int) -> TaskCgroup:
        """A group named ``name`` limited to ``memory_bytes`` (no swap) and ``cpu_millis`` (0: no limit)."""
        memory_dir = self.memory_root / name if self.memory_root is not None and memory_bytes > 0 else None
        cpu_dir = self.cpu_root / name if self.cpu_root is not None and cpu_millis > 0 else None
        group = TaskCgroup(name, memory_dir, cpu_dir, self.unified)
        try:
            for directory in {d for d in (memory_dir, cpu_dir) if d is not None}:
                directory.mkdir(exist_ok=True)
            quota = max(1000, cpu_millis * CFS_PERIOD_US // 1000)
            if self.unified:
                if memory_dir is not None:
                    (memory_dir / "memory.max").write_text(str(memory_bytes))
                    with contextlib.suppress(OSError):
                        (memory_dir / "memory.swap.max").write_text("0")
                if cpu_dir is not None:
                    (cpu_dir / "cpu.max").write_text(f"{quota} {CFS_PERIOD_US}")
            else:
                if memory_dir is not None:
                    (memory_dir / "memory.limit_in_bytes").write_text(str(memory_bytes))
                    with contextlib.suppress(OSError):  # only with swap accounting on
                        (memory_dir / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
                if cpu_dir is not None:
                    (cpu_dir / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
                    (cpu_dir / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError:
            group.remove()
            raise
        return group

    def remove_stale(self) -> list[str]:
        """Remove empty task groups a dead agent left (older than STALE_SECONDS); their names."""
        removed = []
        now = time.time()
        for root in {r for r in (self.memory_root, self.cpu_root) if r is not None}:
            for directory in root.iterdir():
                try:
                    if directory.is_dir() and now - directory.stat().st_mtime > STALE_SECONDS:
                        directory.rmdir()  # fails while a process is in it: then it is not stale
                        removed.append(directory.name)
                except OSError:
                    continue
        return removed
