"""The state a scheduler run hands to the next (continue-as-new), and how the next run loads it in steps.

At 10,000 workers and 100,000 pending or placed tasks the state is ~200,000 Python objects: building
them in one workflow task took ~1 s (and 1.4 s under load, near the SDK's 2 s deadlock detector). So
`pack` writes zlib of JSON lines, chunks of a bounded weight (workers, queued jobs, placements by job),
a line of what changed while they were packed, and a small header last, and `StateLoader` builds the
state a few chunks per workflow task: the scheduler loads `step` weight units, awaits a no-op activity
(a new workflow task), loads the next, and so on, holding the signals that arrive meanwhile
(scheduler_workflow). A small state loads in the first task, as before. The header carries the counts
the `summary` query answers while the rest loads.

Pure functions of the state (no Temporal calls): the same code runs in the workflow and in tests.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator
from itertools import compress, filterfalse
from operator import attrgetter, countOf, is_not, ne
from typing import Any

from activities.contracts import task_workflow_id
from workflows import reservation_state
from workflows.messages import ConstraintSpec, SchedulingSpec
from workflows.placement_index import Placement
from workflows.scheduler_actions import new_ring
from workflows.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.sharing_state import Books
from workflows.worker_lifecycle import WorkerState

PACK_VERSION = 5  # 5: chunk lines a run loads a few per workflow task, a line of changes, the header last
# 4 (the header first; no worker changes in the last line): what a run on the build before packs for its
# next run, which may start on this build (continue-as-new onto the current build).
READABLE_VERSIONS = (4, 5)
# Weight units a run loads (or packs) per workflow task (a placement is 1, a worker 4, a queued job 2 plus
# its attempts / 16): 20,000 units took 20-40 ms of CPU in a plain process, up to ~5x that in the sandbox
# on a loaded machine. A state of less weight loads (and packs) in one task, as before.
LOAD_STEP = 12_000
CHUNK = 2_500  # weight units per chunk line: a step loads whole chunks
_STATES = {s.value: s for s in WorkerState}  # WorkerState(value) costs microseconds per call


def _spec_row(spec: SchedulingSpec) -> list[Any]:
    return [
        spec.cpu_millis, spec.memory_bytes, spec.gpus, spec.tpus,
        [[c.key, c.op, c.value, True] if c.soft else [c.key, c.op, c.value] for c in spec.constraints],
        spec.group_by, spec.priority, spec.scheduling_timeout_seconds, spec.tolerations, spec.num_groups,
        spec.ports, spec.coordinator, spec.band, spec.user, spec.max_concurrent,
    ]  # fmt: skip


def _spec(row: list[Any]) -> SchedulingSpec:
    cpu, memory, gpus, tpus, constraints, group_by, priority, timeout, tolerations, *rest = row
    groups, ports, coordinator, band, user, *later = rest  # `later`: fields a pack from an older build lacks
    return SchedulingSpec(
        cpu, memory, gpus, tpus, [ConstraintSpec(*c) for c in constraints], group_by, priority, timeout, tolerations,
        num_groups=groups, ports=ports, coordinator=coordinator, band=band, user=user,
        max_concurrent=later[0] if later else 0,
    )  # fmt: skip


def _chunks(kind: str, rows: Iterator[tuple[int, Any]], chunk: int) -> Iterator[str]:
    """Lines of `[kind, weight, rows]`, each of about `chunk` weight."""
    batch: list[Any] = []
    weight = 0
    for w, row in rows:
        batch.append(row)
        weight += w
        if weight >= chunk:
            yield json.dumps([kind, weight, batch], separators=(",", ":"))
            batch, weight = [], 0
    if batch:
        yield json.dumps([kind, weight, batch], separators=(",", ":"))


def _worker_row(w: dict[str, Any]) -> list[Any]:
    """A worker's row, from its entry's attributes (`WorkerEntry.__dict__`, or a copy of it)."""
    return [w["worker_id"], w["session"], w["cpu_millis"], w["memory_bytes"], w["gpus"], w["tpus"], w["attributes"],
            w["runtime"], w["state"].value, w["suspect_until"], w["dispatch_failures"], w["cordoned"], w["lost_at"],
            w["host"], w["address"], list(w["port_range"])]  # fmt: skip


def _pending_rows(entries: Iterable[tuple[PendingEntry, dict[int, int]]], chunk: int) -> Iterator[tuple[int, Any]]:
    """A job per row; a job with more attempts than a chunk holds is split over several rows."""
    per_row = chunk * 16
    for e, attempts in entries:
        flat = [n for pair in attempts.items() for n in pair]
        spec = _spec_row(e.spec)
        for start in range(0, max(1, len(flat)), 2 * per_row):
            part = flat[start : start + 2 * per_row]
            yield 2 + len(part) // 32, [e.job_id, spec, part, e.submitted_at]


def _placement_rows(placements: Iterable[Placement], names: _Names, chunk: int) -> Iterator[tuple[int, Any]]:
    """Placements by job and shape: [job_id, cpu, memory, gpus, tpus, user, band, gang, runs of 4 numbers]."""
    index = names.index
    groups: dict[tuple[str, int, int, int, int, str, str, bool], list[Any]] = {}
    for p in placements:
        worker = index.get(p.worker_id)
        if worker is None:
            worker = names.add(p.worker_id)
        groups.setdefault((p.job_id, p.cpu_millis, p.memory_bytes, p.gpus, p.tpus, p.user, p.band, p.gang), []).extend(
            (p.task_index, p.attempt, worker, p.placed_at)
        )
    for key, runs in groups.items():
        for start in range(0, len(runs), 4 * chunk):
            part = runs[start : start + 4 * chunk]
            yield len(part) // 4, [*key, part]


class _Names:
    """The worker names placement rows refer to by position."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(names)
        self.index = {name: i for i, name in enumerate(self.names)}

    def add(self, name: str) -> int:
        self.index[name] = len(self.names)
        self.names.append(name)
        return self.index[name]


class Packer:
    """Packs the state over several workflow tasks while the run goes on, then adds what changed meanwhile.

    Packing 10,000 workers, 100,000 placements and a queue of 100,000 tasks took ~0.25 s of CPU: too
    much for the one workflow task that continues as new. So the run packs `step` weight per `step()`,
    one workflow task each, while signals keep changing the live state: the workers (each copied as it
    is packed), then a frozen view of the queue (a queued job's attempts are copied) and of the
    placements (a shallow copy: a placement is replaced, never changed), compressing as it goes.
    `finish()` adds a line with what changed since each was packed (workers, placements and queued jobs
    added, replaced or gone), found by comparisons that run in C, and the header. Loaded in order, the
    lines give the live state.
    """

    def __init__(self, state: SchedulerState, step: int = LOAD_STEP, chunk: int = CHUNK) -> None:
        self._step, self._chunk = step, chunk
        self._state = state
        self._names = _Names(state.workers)
        self._w_keys = list(state.workers)
        self._workers: dict[str, dict[str, Any]] = {}  # worker id -> its entry's attributes as packed
        self._placements = dict(state.placements)
        self._pending = {job_id: (e, dict(e.attempts)) for job_id, e in state.pending.items()}
        self._x_keys = list(self._placements)
        self._q_keys = list(self._pending)
        self._w_at = self._x_at = self._q_at = 0
        self._weight = 0  # of the lines packed so far
        self._z = zlib.compressobj(1)  # level 1: 3x faster than 6, ~15% bigger
        self._packed: list[bytes] = []  # compressed so far
        self.steps = 0  # steps taken so far
        self.counts: list[int] = []  # the header's counts, once finished

    def _add(self, lines: Iterable[str]) -> None:
        self._packed += [self._z.compress(line.encode() + b"\n") for line in lines]

    def step(self) -> bool:
        """Pack about `step` weight (workers, then the frozen queue and placements); True once all is packed."""
        room = self._step
        self.steps += 1
        if self._w_at < len(self._w_keys):
            end = min(len(self._w_keys), self._w_at + max(1, room // 4))
            live, frozen = self._state.workers, self._workers
            rows = []
            for key in self._w_keys[self._w_at : end]:
                worker = live.get(key)
                if worker is not None:  # gone before its turn: not packed, and not "gone" at the finish
                    frozen[key] = copied = dict(worker.__dict__)
                    copied["attributes"] = dict(worker.attributes)  # compared at the finish, even if changed in place
                    rows.append((4, _worker_row(copied)))
            self._add(_chunks("w", iter(rows), self._chunk))
            room -= 4 * (end - self._w_at)
            self._weight += 4 * len(rows)
            self._w_at = end
        if room > 0 and self._q_at < len(self._q_keys):
            end = self._q_at
            used = 0
            while end < len(self._q_keys) and used < room:
                used += 2 + len(self._pending[self._q_keys[end]][1]) // 16
                end += 1
            entries = (self._pending[job_id] for job_id in self._q_keys[self._q_at : end])
            self._add(_chunks("q", _pending_rows(entries, self._chunk), self._chunk))
            self._q_at = end
            self._weight += used
            room -= used
        if room > 0 and self._x_at < len(self._x_keys):
            end = min(len(self._x_keys), self._x_at + room)
            placements = (self._placements[key] for key in self._x_keys[self._x_at : end])
            self._add(_chunks("x", _placement_rows(placements, self._names, self._chunk), self._chunk))
            self._weight += end - self._x_at
            self._x_at = end
        return self._w_at >= len(self._w_keys) and self._q_at >= len(self._q_keys) and self._x_at >= len(self._x_keys)

    def finish(self, state: SchedulerState) -> bytes:
        """The packed state: the lines packed by the steps, what changed since, and the header."""
        while not self.step():
            pass
        live_x, frozen_x = state.placements, self._placements
        gone_x = list(filterfalse(live_x.__contains__, frozen_x))
        changed_x = list(compress(live_x.values(), map(is_not, map(frozen_x.get, live_x), live_x.values())))
        live_q, frozen_q = state.pending, self._pending
        gone_q = [job_id for job_id, (e, _) in frozen_q.items() if live_q.get(job_id) is not e]
        changed_q = []
        for job_id, e in live_q.items():
            frozen = frozen_q.get(job_id)
            if frozen is None or frozen[0] is not e or frozen[1] != e.attempts:
                changed_q.append((e, e.attempts))
        live_w, frozen_w = state.workers, self._workers
        gone_w = list(filterfalse(live_w.__contains__, frozen_w))
        changed_w = list(compress(live_w, map(ne, map(frozen_w.get, live_w), map(_DICT, live_w.values()))))
        # The loader keeps the packed order and adds new workers last; say the order when the run changed it.
        new_w = list(filterfalse(frozen_w.__contains__, changed_w))
        same_order = list(filter(live_w.__contains__, frozen_w)) + new_w == list(live_w)
        delta = [
            gone_x, [row for _, row in _placement_rows(changed_x, self._names, len(changed_x) + 1)],
            gone_q, [row for _, row in _pending_rows(changed_q, len(changed_q) * 16 + 16)],
            gone_w, [_worker_row(live_w[key].__dict__) for key in changed_w], [] if same_order else list(live_w),
        ]  # fmt: skip
        weight = len(gone_x) + len(changed_x) + 2 * (len(gone_q) + len(changed_q)) + len(gone_w) + 4 * len(changed_w)
        healthy = len(live_w) - countOf(map(_STATE, live_w.values()), WorkerState.LOST)
        header: dict[str, Any] = {
            "v": PACK_VERSION,
            "step": self._step,
            "store_url": state.store_url,
            "names": self._names.names,
            "reasons": state.pending_reasons,
            "actions": list(state.actions),
            "ports": {key: live_x[key].ports for key in state.ported if key in live_x and live_x[key].ports},
            "port_cursors": state.port_cursors,
            "books": state.books.pack(),
            # What `summary` answers while the rest loads: healthy and all workers, pending and running tasks.
            "counts": [healthy, len(live_w), sum(map(len, map(_ATTEMPTS, live_q.values()))), len(live_x)],
            "weight": self._weight + weight,
        }
        self.counts = header["counts"]
        if state.reservations:  # optional: a state without reservations packs without the key
            header["rsv"] = [reservation_state.to_row(r) for r in state.reservations.values()]
        self._add([json.dumps(["d", weight, delta], separators=(",", ":"))])
        tail = self._z.compress(json.dumps(header, separators=(",", ":")).encode()) + self._z.flush()
        return b"".join([*self._packed, tail])


_DICT = attrgetter("__dict__")
_STATE = attrgetter("state")
_ATTEMPTS = attrgetter("attempts")


def pack(state: SchedulerState, step: int = LOAD_STEP, chunk: int = CHUNK) -> bytes:
    """The state as zlib of JSON lines: a header, then chunks the next run loads `step` weight at a time.

    `step` and `chunk` are arguments so a test can make a small state load in many steps. At once (tests
    and tools); the workflow packs with a `Packer`, over several workflow tasks.
    """
    return Packer(state, step, chunk).finish(state)


class StateLoader:
    """Builds the state `pack` wrote, `step()` by `step()`; `state` is usable (partly filled) throughout.

    The header (the last line: names, reasons, actions, books, reservations, counts) is read at once;
    workers, then the queue, then placements come chunk by chunk, in the order they were packed, so the
    queue keeps its FIFO order and a placement's ports (in the header) are set when the placement is built.
    """

    def __init__(self, data: bytes) -> None:
        lines = zlib.decompress(data).split(b"\n")
        header = json.loads(lines.pop(0) if lines[0].startswith(b"{") else lines.pop())  # first in version 4
        version = header.get("v") if isinstance(header, dict) else None
        if version not in READABLE_VERSIONS:
            raise ValueError(f"packed scheduler state has version {version!r}, expected one of {READABLE_VERSIONS}")
        self._lines = lines
        self._next = 0
        self._step = max(1, int(header["step"]))
        self._names: list[str] = header["names"]
        self._ports: dict[str, dict[str, int]] = header["ports"]
        self.counts: list[int] = header["counts"]
        self.small = header["weight"] <= self._step  # loads in one step
        self.state = state = SchedulerState(
            store_url=header["store_url"], pending_reasons=header["reasons"], port_cursors=header["port_cursors"],
            books=Books.unpack(header["books"]),
        )  # fmt: skip
        state.actions = new_ring(header["actions"])
        for row in header.get("rsv", ()):
            held = reservation_state.from_row(row)
            state.reservations[held.reservation_id] = held
        self.steps = 0  # steps taken so far

    @property
    def done(self) -> bool:
        return self._next >= len(self._lines)

    def step(self) -> bool:
        """Load chunks until `step` weight units are loaded (at least one chunk); True once all is loaded."""
        loaded = 0
        while not self.done and loaded < self._step:
            kind, weight, rows = json.loads(self._lines[self._next])
            self._next += 1
            loaded += weight
            getattr(self, f"_load_{kind}")(rows)
        self.steps += 1
        return self.done

    def _load_w(self, rows: list[list[Any]]) -> None:
        workers = self.state.workers
        for row in rows:
            entry = workers[row[0]] = WorkerEntry(*row)
            entry.state = _STATES[row[8]]
            entry.port_range = (int(row[15][0]), int(row[15][1]))

    def _load_q(self, rows: list[list[Any]]) -> None:
        pending = self.state.pending
        for job_id, spec, attempts, submitted_at in rows:
            queued = dict(zip(attempts[::2], attempts[1::2], strict=True))
            entry = pending.get(job_id)
            if entry is None:
                pending[job_id] = PendingEntry(job_id, _spec(spec), queued, submitted_at)
            else:  # the rest of a job split over rows
                entry.attempts.update(queued)

    def _load_d(self, delta: list[Any]) -> None:
        """What changed while the state was packed (Packer.finish): gone first, then the new and changed."""
        gone_x, rows_x, gone_q, rows_q, *workers_delta = delta
        gone_w, rows_w, order_w = workers_delta or ([], [], [])  # version 4 packed the workers last
        for key in gone_x:
            del self.state.placements[key]
            self.state.ported.discard(key)
        self._load_x(rows_x)
        pending = self.state.pending
        for job_id in gone_q:
            del pending[job_id]
        for job_id, spec, attempts, submitted_at in rows_q:
            queued = dict(zip(attempts[::2], attempts[1::2], strict=True))
            entry = pending.get(job_id)
            if entry is None:
                pending[job_id] = PendingEntry(job_id, _spec(spec), queued, submitted_at)
            else:  # the same entry, its attempts changed: it keeps its place in the queue
                entry.attempts = queued
        workers = self.state.workers
        for worker_id in gone_w:
            del workers[worker_id]
        self._load_w(rows_w)  # a changed worker keeps its place, a new one comes last
        if order_w:
            self.state.workers = {worker_id: workers[worker_id] for worker_id in order_w}

    def _load_x(self, rows: list[list[Any]]) -> None:
        names, ports, ported = self._names, self._ports, self.state.ported
        loaded = []
        for job_id, cpu, memory, gpus, tpus, user, band, gang, runs in rows:
            for i in range(0, len(runs), 4):
                key = task_workflow_id(job_id, runs[i])
                held = ports.get(key) or {}
                loaded.append((key, Placement(job_id, runs[i], runs[i + 1], names[runs[i + 2]], cpu, memory, gpus,
                                              tpus, held, user, band, gang, runs[i + 3])))  # fmt: skip
                if held:
                    ported.add(key)
        self.state.placements.load(loaded)  # indexed as they are set (placement_index)


def unpack(data: bytes) -> SchedulerState:
    """The whole state `pack` wrote, at once (tests and tools; the workflow loads it in steps)."""
    loader = StateLoader(data)
    while not loader.step():
        pass
    return loader.state
