"""LocalPlatform: a slice is `hosts_per_slice` detached `iris worker serve` processes on this machine.

What a cloud keeps for us, this platform keeps on disk and in the process table,
never in memory, so every step survives a controller restart and is idempotent:

- `$IRIS_HOME/slices/<slice id>.json` is the slice's "infrastructure" record
  (written by `create_slice`, removed by `terminate`), carrying the Iris labels;
- every worker process is marked with environment variables (`IRIS_LOCAL_WORKER`,
  `IRIS_MANAGED`, `IRIS_SLICE_ID`, `IRIS_SCALE_GROUP`, `IRIS_HOST_INDEX`) and found
  again by reading them back with psutil (`find_workers`); each runs in its own session,
  so terminating stops its whole process group (SIGTERM, a grace period, then SIGKILL).

`iris cluster up` starts, finds and stops its static `local.worker_groups` with the same
`worker_argv`, `start_worker`, `find_workers` and `stop_processes` (activities.platforms.
local_process), so there is one way to start and stop a local worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field

from activities.contracts.fleet import (
    MANAGED_LABEL,
    SCALE_GROUP_LABEL,
    SLICE_ID_LABEL,
    AttributeValue,
    ControlPlaneAddress,
    HostInfo,
    PlatformState,
    ScaleGroupSpec,
    SliceInfo,
    host_attributes,
    slice_labels,
    worker_id_for,
)
from activities.home import iris_home
from activities.platforms.base import QuotaExhausted, SliceFailed
from activities.platforms.local_process import (
    START_LINE,
    FoundWorker,
    LocalProcess,
    find_workers,
    how_it_ended,
    start_worker,
    stop_processes,
    worker_log_path,
)
from scheduler.attributes import value_text

log = structlog.get_logger("iris.platforms.local")

# Environment markers of a slice's worker process (the process-table equivalent of cloud labels).
MANAGED_ENV = "IRIS_MANAGED"
SLICE_ENV = "IRIS_SLICE_ID"
GROUP_ENV = "IRIS_SCALE_GROUP"
INDEX_ENV = "IRIS_HOST_INDEX"


class Settings(BaseModel):
    """The `local:` block of a scale group."""

    model_config = ConfigDict(extra="forbid")

    worker_command: list[str] | None = Field(
        default=None, description="the agent command before its flags; default: this Python's `iris worker serve`"
    )
    max_hosts: int | None = Field(
        default=None, ge=1, description="quota: local slice hosts this machine runs at once, all groups together"
    )


def worker_argv(
    *,
    worker_id: str,
    control: ControlPlaneAddress,
    cpu_millis: int,
    memory_bytes: int,
    attributes: Mapping[str, AttributeValue],
    runtime: str = "process",
    gpus: int = 0,
    tpus: int = 0,
    image: str = "",
    command: Sequence[str] | None = None,
) -> list[str]:
    """`iris worker serve` for one local worker, with its capacity and attributes as flags.

    A local worker is its user's: its tasks run as that user (and reach its Python).
    """
    argv = [
        *(command or [sys.executable, "-m", "iris", "worker", "serve"]),
        "--temporal", control.temporal_address,
        "--store", control.store_url,
        "--worker-id", worker_id,
        "--cpu", str(cpu_millis / 1000),
        "--memory", str(memory_bytes),
        "--runtime", str(runtime),
        "--task-user", "",
        "--address", "127.0.0.1",  # local workers share this machine: their tasks meet on loopback
    ]  # fmt: skip
    if image:
        argv += ["--default-image", image]
    if gpus:
        argv += ["--gpus", str(gpus)]
    if tpus:
        argv += ["--tpus", str(tpus)]
    for key, value in attributes.items():
        argv += ["--attribute", f"{key}={value_text(value)}"]
    return argv


def _log_tail(path: Path, limit: int = 400) -> str:
    """What the process's last start printed (after its `=== ... starting:` line), its last `limit` characters.

    Only that start's own output: the line naming the command is ours, and a tail cut inside it
    would show the user a piece of a command line instead of the process's error.
    """
    try:
        text = path.read_bytes()[-64 * 1024 :].decode(errors="replace")
    except OSError:
        return ""
    starts = list(START_LINE.finditer(text))
    if starts:
        text = text[starts[-1].end() :]
    lines = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return lines[-limit:] or "it printed nothing"


def slice_processes(home: Path, labels: Mapping[str, str] | None = None) -> dict[str, dict[int, FoundWorker]]:
    """Live slice worker processes of the Iris in `home`, by slice id and host index, found by their markers.

    The local workers `find_workers` finds that carry a slice's markers (the static workers of
    `iris cluster up` carry none); those matching `labels`, when given.
    """
    found: dict[str, dict[int, FoundWorker]] = {}
    for worker_id, worker in find_workers(home).items():
        env = worker.env
        if env.get(MANAGED_ENV) != "true" or SLICE_ENV not in env or INDEX_ENV not in env:
            continue
        try:
            slice_id, index = env[SLICE_ENV], int(env[INDEX_ENV])
        except ValueError:
            continue
        if worker_id != worker_id_for(slice_id, index):
            continue
        if labels and any(_env_label(env, k) != v for k, v in labels.items()):
            continue
        found.setdefault(slice_id, {})[index] = worker
    return found


def _live_hosts(record: Mapping[str, Any] | None, found: Mapping[int, FoundWorker]) -> dict[int, LocalProcess]:
    """The slice's running host processes by index: those the process table shows as its hosts, and those
    its last bootstrap started that still run though the table does not show them yet.

    A process in the middle of its exec has no environment or command line to read for a moment (the new
    program's are set up after the old one's are gone): under load a host looked for right after its start
    was taken for one that had exited, and its slice failed.
    """
    live = {i: f.process for i, f in found.items()}
    for index, process in _recorded_hosts(record).items():
        if index not in live and process.alive():
            live[index] = process
    return live


def _recorded_hosts(record: Mapping[str, Any] | None) -> dict[int, LocalProcess]:
    """The host processes the slice's last bootstrap recorded (`pids`: index -> [pid, start ticks since boot])."""
    out = {}
    for key, entry in (record or {}).get("pids", {}).items():
        with contextlib.suppress(TypeError, ValueError, IndexError):  # a record written otherwise: not ours to read
            out[int(key)] = LocalProcess(int(entry[0]), entry[1] if isinstance(entry[1], int) else None)
    return out


def slice_records(home: Path) -> dict[str, dict[str, Any]]:
    """The slice records under `home`, by slice id (one that cannot be read is skipped: not ours)."""
    out = {}
    for path in sorted((home / "slices").glob("*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            record = json.loads(path.read_text())
            out[record["slice_id"]] = record
    return out


def recorded_slice_hosts(home: Path) -> dict[str, LocalProcess]:
    """Every slice host whose last bootstrap recorded it and whose process still runs, by worker id: what a
    scan of the process table can miss (a host in the middle of its exec; `_live_hosts`)."""
    return {
        worker_id_for(slice_id, index): process
        for slice_id, record in slice_records(home).items()
        for index, process in _recorded_hosts(record).items()
        if process.alive()
    }


def _env_label(env: Mapping[str, str], label: str) -> str | None:
    return {MANAGED_LABEL: env.get(MANAGED_ENV), SCALE_GROUP_LABEL: env.get(GROUP_ENV),
            SLICE_ID_LABEL: env.get(SLICE_ENV)}.get(label)  # fmt: skip


class LocalPlatform:
    """Slices of local worker processes; see the module docstring for where their state lives."""

    name = "local"

    def __init__(self, group: ScaleGroupSpec, home: Path | None = None) -> None:
        self.group = group
        self.settings = Settings.model_validate(group.settings)
        self.home = home or iris_home()

    # -- the record of a slice

    def _record_path(self, slice_id: str) -> Path:
        return self.home / "slices" / f"{slice_id}.json"

    def _records(self) -> dict[str, dict[str, Any]]:
        return slice_records(self.home)

    def _write_record(self, record: Mapping[str, Any]) -> None:
        path = self._record_path(record["slice_id"])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, sort_keys=True))
        tmp.replace(path)

    def log_path(self, worker_id: str) -> Path:
        """Where a slice worker writes its output (as a static worker of the local cluster does)."""
        return worker_log_path(self.home, worker_id)

    # -- the Platform protocol

    async def create_slice(self, slice_id: str, group: ScaleGroupSpec) -> SliceInfo:
        """Record the slice (or find the record a previous call wrote); QuotaExhausted past `max_hosts`."""
        existing = await self.describe(slice_id)
        if existing is not None:
            return existing
        if self.settings.max_hosts is not None:
            used = sum(int(r.get("hosts_per_slice", 0)) for r in self._records().values())
            if used + group.hosts_per_slice > self.settings.max_hosts:
                raise QuotaExhausted(
                    f"local: {group.hosts_per_slice} more hosts would exceed max_hosts {self.settings.max_hosts} "
                    f"({used} in use)"
                )
        self._write_record(
            {
                "slice_id": slice_id,
                "scale_group": group.name,
                "hosts_per_slice": group.hosts_per_slice,
                "labels": slice_labels(group.name, slice_id),
                "created_at": time.time(),
                "bootstrapped": False,
            }
        )
        log.info("local_slice.created", slice_id=slice_id, group=group.name, hosts=group.hosts_per_slice)
        info = await self.describe(slice_id)
        assert info is not None
        return info

    async def describe(self, slice_id: str) -> SliceInfo | None:
        return await asyncio.to_thread(self._describe, slice_id)

    def _describe(self, slice_id: str, procs: Mapping[int, FoundWorker] | None = None) -> SliceInfo | None:
        record = self._records().get(slice_id)
        found = slice_processes(self.home, {SLICE_ID_LABEL: slice_id}).get(slice_id, {}) if procs is None else procs
        if record is None and not found:
            return None
        live = _live_hosts(record, found)
        if record is None:  # processes without a record: a half-terminated slice, still Iris's to clean up
            group = next((p.env.get(GROUP_ENV, "") for p in found.values()), "")
            count, labels, bootstrapped = max(found) + 1, slice_labels(group, slice_id), True
        else:
            group, count = record["scale_group"], int(record["hosts_per_slice"])
            labels, bootstrapped = record["labels"], bool(record.get("bootstrapped"))
        hosts = [
            HostInfo(
                index=i,
                address="127.0.0.1",
                worker_id=worker_id_for(slice_id, i),
                state=f"pid {live[i].pid}" if i in live else ("exited" if bootstrapped else "not started"),
            )
            for i in range(count)
        ]
        state, error = PlatformState.READY, ""
        if record is None:
            state, error = PlatformState.DELETING, "record gone; processes left over"
        elif bootstrapped and len(live) < count:
            gone = [h for h in hosts if h.index not in live]
            started = _recorded_hosts(record).get(gone[0].index)  # what its last bootstrap started
            how = how_it_ended(started.pid) if started is not None else ""
            state = PlatformState.PREEMPTED
            error = (
                f"worker process exited: {', '.join(h.worker_id for h in gone)}{f' ({how})' if how else ''}; "
                f"{_log_tail(self.log_path(gone[0].worker_id))}"
            )
        return SliceInfo(slice_id=slice_id, scale_group=group, state=state, hosts=hosts, labels=labels, error=error)

    async def bootstrap(self, slice_id: str, group: ScaleGroupSpec, control: ControlPlaneAddress) -> None:
        """Start every host's agent that is not running yet (all of them the first time)."""
        await asyncio.to_thread(self._bootstrap, slice_id, group, control)

    def _bootstrap(self, slice_id: str, group: ScaleGroupSpec, control: ControlPlaneAddress) -> None:
        record = self._records().get(slice_id)
        if record is None:
            raise SliceFailed(f"local slice {slice_id} does not exist (terminated?)")
        running = _live_hosts(record, slice_processes(self.home, {SLICE_ID_LABEL: slice_id}).get(slice_id, {}))
        env = {**os.environ, **control.extra_env, "PYTHONUNBUFFERED": "1"}
        markers = {MANAGED_ENV: "true", SLICE_ENV: slice_id, GROUP_ENV: group.name}
        record["bootstrapped"] = True  # recorded first: a crash after a spawn still lets terminate find it
        self._write_record(record)
        pids = record.setdefault("pids", {})
        for i in range(group.hosts_per_slice):
            if i in running:
                continue
            worker_id = worker_id_for(slice_id, i)
            argv = worker_argv(
                worker_id=worker_id, control=control, cpu_millis=group.cpu_millis, memory_bytes=group.memory_bytes,
                attributes=host_attributes(group, slice_id, i), runtime=group.runtime, gpus=group.gpus,
                tpus=group.tpus, image=group.image, command=self.settings.worker_command,
            )  # fmt: skip
            started = start_worker(
                argv, home=self.home, worker_id=worker_id, env=env, markers={**markers, INDEX_ENV: str(i)}
            )
            log.info("local_slice.host_started", slice_id=slice_id, worker_id=worker_id, pid=started.pid)
            pids[str(i)] = [started.pid, started.started]
        self._write_record(record)  # the hosts' processes: see `_live_hosts`

    async def list_slices(self, labels: Mapping[str, str]) -> list[SliceInfo]:
        return await asyncio.to_thread(self._list, labels)

    def _list(self, labels: Mapping[str, str]) -> list[SliceInfo]:
        by_slice = slice_processes(self.home, labels)
        ids = set(by_slice)
        for slice_id, record in self._records().items():
            if all(record["labels"].get(k) == v for k, v in labels.items()):
                ids.add(slice_id)
        infos = [self._describe(s, by_slice.get(s, {})) for s in sorted(ids)]
        return [i for i in infos if i is not None]

    async def terminate(self, slice_id: str) -> None:
        """Stop every host's process group (grace, then kill), then drop the record; gone already is fine."""
        await asyncio.to_thread(self._terminate, slice_id)

    def _terminate(self, slice_id: str) -> None:
        found = slice_processes(self.home, {SLICE_ID_LABEL: slice_id}).get(slice_id, {})
        procs = _live_hosts(self._records().get(slice_id), found)
        stop_processes({worker_id_for(slice_id, i): p for i, p in procs.items()})
        with contextlib.suppress(FileNotFoundError):
            self._record_path(slice_id).unlink()
        log.info("local_slice.terminated", slice_id=slice_id, processes=len(procs))
