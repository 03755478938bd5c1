"""Memory and CPU limits for host processes, through the kernel's cgroups (v1 or v2).

The container runtimes get limits from their engine; a plain process gets them
here: one cgroup per task attempt under ``iris/`` in the memory and cpu
hierarchies (v1) or the unified one (v2). The kernel enforces them exactly as it
does for a container (memory: the OOM killer inside the group, no swap; cpu: a
CFS quota), and the group's ``oom_kill`` counter says afterwards whether a task
that died of SIGKILL was OOM-killed, so the failure is reported as such.

When an attempt ends (its main process exited or was killed), every process still in its group
is SIGKILLed before the group is removed: a process that left the task's process group (``setsid``,
a daemonizing fork) is still in its cgroup, as in Slurm's proctrack/cgroup or a Kubernetes pod.
Only the process runtime's groups are Iris's: docker and containerd remove their own containers.

Only an agent that can write the hierarchy (root, a writable cgroupfs) gets
limits; otherwise ``CgroupLimits.detect`` returns None and the agent says once
that the process runtime cannot enforce limits on this host.
"""

from __future__ import annotations

import contextlib
import os
import signal
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
KILL_WAIT_SECONDS = 2.0  # how long `kill_all` waits for SIGKILLed members to leave the group
_KILL_POLL_SECONDS = 0.01


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

    def members(self) -> set[int]:
        """Pids of the processes in the group, in any of its hierarchies (empty once all have exited)."""
        pids: set[int] = set()
        for directory in self._dirs():
            pids |= _listed_pids(directory)
        return pids

    def kill_all(self, wait_seconds: float = KILL_WAIT_SECONDS) -> bool:
        """SIGKILL every process in the group, again until it is empty or `wait_seconds` pass; whether it is.

        Blocking (it sleeps while members die): async callers run it in a thread. A task's stray
        processes (`setsid sleep &`) outlived it, kept their memory and held the group, so it was
        never removed (`cgroup_not_removed ... Device or resource busy`). cgroup v2 kills the whole
        group at once through `cgroup.kill` where the kernel has it (5.14); otherwise each listed pid
        is signalled, repeatedly, since a member may fork while the others are being killed.
        """
        deadline = time.monotonic() + wait_seconds
        pause = _KILL_POLL_SECONDS
        while True:
            killed_at_once = self.unified and self._write_kill()
            for directory in self._dirs():
                if not killed_at_once:
                    _kill_listed(directory)
            if not self.members():
                return True
            if time.monotonic() >= deadline:
                logger.warning("cgroup_not_emptied", name=self.name, pids=sorted(self.members()))
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _write_kill(self) -> bool:
        """Whether `cgroup.kill` (v2, Linux 5.14+) took the request to kill every member."""
        for directory in self._dirs():
            try:
                (directory / "cgroup.kill").write_text("1")
            except FileNotFoundError:
                return False
            except OSError as exc:
                logger.info("cgroup_kill_refused", path=str(directory), error=str(exc))
                return False
        return True

    def _dirs(self) -> set[Path]:
        return {d for d in (self.memory_dir, self.cpu_dir) if d is not None}

    def remove(self) -> None:
        """SIGKILL what is left in the group (without waiting for it: `kill_all` waits), then delete its directories.

        The kernel refuses to delete a group while a process is still in it; that is logged.
        """
        if self.members():
            self.kill_all(wait_seconds=0.0)
        for directory in self._dirs():
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.warning("cgroup_not_removed", path=str(directory), error=str(exc))


def _listed_pids(directory: Path) -> set[int]:
    """The pids in one cgroup directory's `cgroup.procs` (v1's `tasks` if that cannot be read)."""
    for name in ("cgroup.procs", "tasks"):
        try:
            return {int(line) for line in (directory / name).read_text().split()}
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            return set()
    return set()


def _kill_listed(directory: Path) -> None:
    """SIGKILL each process listed in `directory`, never one that took a listed pid after its owner exited.

    Each pid is pinned with a pidfd first, then the listing is read again: a pid still listed is
    the pinned process (no two live processes share one). Without pidfds (Linux < 5.3) it is
    signalled by number.
    """
    pinned: dict[int, int] = {}
    try:
        for pid in _listed_pids(directory):
            try:
                pinned[pid] = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            except (OSError, AttributeError):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        still = _listed_pids(directory)
        for pid, fd in pinned.items():
            if pid in still:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        for fd in pinned.values():
            os.close(fd)


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
