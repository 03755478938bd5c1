"""Whether the kernel OOM-killed a process of a given cgroup, from the kernel's own log.

The kernel writes one ``oom-kill:`` record per OOM kill, naming the killed task's cgroup (``task_memcg=``), at the
moment of the kill. An engine learns of the kill later and can miss it: containerd's runc shim adds a container's
cgroup to its OOM watcher only after ``runc start`` returns, so a task OOM-killed in its first milliseconds on a
stalled shim leaves Docker's ``OOMKilled`` false and no ``oom`` event (the likely cause of a 64 MiB task reported as
a bare exit 137 in two of six runs of the suite under load; not reproduced outside them).
The kernel's record has no such race. Reading it needs root (``/dev/kmsg``); kubelet's cAdvisor reads OOM kills the
same way.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Final

KMSG: Final = Path("/dev/kmsg")
_RECORD_BYTES: Final = 8192  # a /dev/kmsg read returns one record, at most this long
_TASK_MEMCG: Final = re.compile(r"\boom-kill:.*?\btask_memcg=([^,\s]+)")


def oom_killed_cgroups(records: list[str]) -> set[str]:
    """The task cgroups named by the ``oom-kill:`` records among `records` (lines of the kernel log)."""
    return {match.group(1) for line in records if (match := _TASK_MEMCG.search(line))}


def kernel_records(path: Path | None = None) -> list[str] | None:
    """Every record the kernel's log (`KMSG`) still holds, oldest first; None when it cannot be read (not root, no
    log)."""
    try:
        fd = os.open(path or KMSG, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    records: list[str] = []
    try:
        while True:
            try:
                chunk = os.read(fd, _RECORD_BYTES)
            except BlockingIOError:  # the end of the log
                break
            except BrokenPipeError:  # the oldest records were overwritten while reading: skip on
                continue
            if not chunk:
                break
            records.append(chunk.decode("utf-8", "replace"))
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return records


def oom_killed(cgroup_name: str, path: Path | None = None) -> bool | None:
    """Whether the kernel's log records an OOM kill of a task whose cgroup's last part contains `cgroup_name` (a
    container id: ``/docker/<id>`` with cgroupfs, ``docker-<id>.scope`` with systemd); None when it cannot be read."""
    records = kernel_records(path)
    if records is None:
        return None
    return any(cgroup_name in memcg.rsplit("/", 1)[-1] for memcg in oom_killed_cgroups(records))
