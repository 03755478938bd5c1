"""The state a scheduler run hands to the next (continue-as-new), and how the next run loads it in steps.

At 10,000 workers and 100,000 pending or placed tasks the state is ~200,000 Python objects: building
them in one workflow task took ~1 s (and 1.4 s under load, near the SDK's 2 s deadlock detector). So
`pack` writes zlib of JSON lines, a small header first and then chunks of a bounded weight (workers,
queued jobs, placements by job), and `StateLoader` builds the state a few chunks per workflow task:
the scheduler loads `step` weight units, waits on a 1 ms durable timer (a new workflow task), loads
the next, and so on, holding the signals that arrive meanwhile (scheduler_workflow). A small state
loads in the first task, as before. The header carries the counts the `summary` query answers while
the rest loads.

Pure functions of the state (no Temporal calls): the same code runs in the workflow and in tests.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from typing import Any

from activities.contracts import task_workflow_id
from workflows import reservation_state
from workflows.messages import ConstraintSpec, SchedulingSpec
from workflows.scheduler_actions import new_ring
from workflows.scheduler_state import PendingEntry, Placement, SchedulerState, WorkerEntry
from workflows.sharing_state import Books
from workflows.worker_lifecycle import WorkerState

PACK_VERSION = 4  # 4: a header line, then chunk lines a run loads a few per workflow task
READABLE_VERSIONS = (4,)  # Iris is unreleased: no older packing is read
# Weight units a run loads per workflow task (a placement is 1, a worker 4, a queued job 2 plus its
# attempts / 16): 30,000 units took 30-50 ms of CPU on a loaded 2-core machine, so a task stays well
# under 200 ms. A state of less weight loads in the run's first task.
LOAD_STEP = 30_000
CHUNK = 2_500  # weight units per chunk line: a step loads whole chunks
_STATES = {s.value: s for s in WorkerState}  # WorkerState(value) costs microseconds per call


def _spec_row(spec: SchedulingSpec) -> list[Any]:
    return [
        spec.cpu_millis, spec.memory_bytes, spec.gpus, spec.tpus,
        [[c.key, c.op, c.value] for c in spec.constraints],
        spec.group_by, spec.priority, spec.scheduling_timeout_seconds, spec.tolerations, spec.num_groups,
        spec.ports, spec.coordinator, spec.band, spec.user,
    ]  # fmt: skip


def _spec(row: list[Any]) -> SchedulingSpec:
    cpu, memory, gpus, tpus, constraints, group_by, priority, timeout, tolerations, *rest = row
    groups, ports, coordinator, band, user = rest
    return SchedulingSpec(
        cpu, memory, gpus, tpus, [ConstraintSpec(*c) for c in constraints], group_by, priority, timeout, tolerations,
        num_groups=groups, ports=ports, coordinator=coordinator, band=band, user=user,
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


def _worker_rows(state: SchedulerState) -> Iterator[tuple[int, Any]]:
    for w in state.workers.values():
        yield 4, [w.worker_id, w.session, w.cpu_millis, w.memory_bytes, w.gpus, w.tpus, w.attributes, w.runtime,
                  w.state.value, w.suspect_until, w.dispatch_failures, w.cordoned, w.lost_at, w.host, w.address,
                  list(w.port_range)]  # fmt: skip


def _pending_rows(state: SchedulerState, chunk: int) -> Iterator[tuple[int, Any]]:
    """A job per row; a job with more attempts than a chunk holds is split over several rows."""
    per_row = chunk * 16
    for e in state.pending.values():
        flat = [n for pair in e.attempts.items() for n in pair]
        spec = _spec_row(e.spec)
        for start in range(0, max(1, len(flat)), 2 * per_row):
            part = flat[start : start + 2 * per_row]
            yield 2 + len(part) // 32, [e.job_id, spec, part, e.submitted_at]


def _placement_rows(state: SchedulerState, index: dict[str, int], chunk: int) -> Iterator[tuple[int, Any]]:
    """Placements by job and shape: [job_id, cpu, memory, gpus, tpus, user, band, gang, runs of 4 numbers]."""
    groups: dict[tuple[str, int, int, int, int, str, str, bool], list[Any]] = {}
    for p in state.placements.values():
        groups.setdefault((p.job_id, p.cpu_millis, p.memory_bytes, p.gpus, p.tpus, p.user, p.band, p.gang), []).extend(
            (p.task_index, p.attempt, index[p.worker_id], p.placed_at)
        )
    for key, runs in groups.items():
        for start in range(0, len(runs), 4 * chunk):
            part = runs[start : start + 4 * chunk]
            yield len(part) // 4, [*key, part]


def pack(state: SchedulerState, step: int = LOAD_STEP, chunk: int = CHUNK) -> bytes:
    """The state as zlib of JSON lines: a header, then chunks the next run loads `step` weight at a time.

    `step` and `chunk` are arguments so a test can make a small state load in many steps.

    Measured at 10k workers, 100k queued and 100k placed tasks: ~0.4 MB.
    """
    names = list(state.workers)
    index = {worker_id: i for i, worker_id in enumerate(names)}
    for p in state.placements.values():
        if p.worker_id not in index:  # a placement on a worker that left meanwhile still holds its place
            index[p.worker_id] = len(names)
            names.append(p.worker_id)
    healthy = sum(1 for w in state.workers.values() if w.healthy)
    header: dict[str, Any] = {
        "v": PACK_VERSION,
        "step": step,
        "store_url": state.store_url,
        "names": names,
        "reasons": state.pending_reasons,
        "actions": list(state.actions),
        "ports": {key: p.ports for key, p in state.placements.items() if p.ports},
        "port_cursors": state.port_cursors,
        "books": state.books.pack(),
        # What `summary` answers while the rest loads: healthy and all workers, pending and running tasks.
        "counts": [healthy, len(state.workers), sum(len(e.attempts) for e in state.pending.values()),
                   len(state.placements)],
    }  # fmt: skip
    if state.reservations:  # optional: a state without reservations packs without the key
        header["rsv"] = [reservation_state.to_row(r) for r in state.reservations.values()]
    lines = [json.dumps(header, separators=(",", ":"))]
    lines += _chunks("w", _worker_rows(state), chunk)
    lines += _chunks("q", _pending_rows(state, chunk), chunk)
    lines += _chunks("x", _placement_rows(state, index, chunk), chunk)
    return zlib.compress("\n".join(lines).encode(), 6)


class StateLoader:
    """Builds the state `pack` wrote, `step()` by `step()`; `state` is usable (partly filled) throughout.

    The header (names, reasons, actions, books, reservations, counts) is read at once; workers, then
    the queue, then placements come chunk by chunk, in the order they were packed, so the queue keeps
    its FIFO order and a placement's ports (in the header) are set when the placement is built.
    """

    def __init__(self, data: bytes) -> None:
        lines = zlib.decompress(data).split(b"\n")
        header = json.loads(lines[0])
        version = header.get("v") if isinstance(header, dict) else None
        if version not in READABLE_VERSIONS:
            raise ValueError(f"packed scheduler state has version {version!r}, expected one of {READABLE_VERSIONS}")
        self._lines = lines
        self._next = 1
        self._step = max(1, int(header["step"]))
        self._names: list[str] = header["names"]
        self._ports: dict[str, dict[str, int]] = header["ports"]
        self.counts: list[int] = header["counts"]
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

    def _load_x(self, rows: list[list[Any]]) -> None:
        placements, names, ports, ported = self.state.placements, self._names, self._ports, self.state.ported
        for job_id, cpu, memory, gpus, tpus, user, band, gang, runs in rows:
            for i in range(0, len(runs), 4):
                key = task_workflow_id(job_id, runs[i])
                held = ports.get(key) or {}
                placements[key] = Placement(job_id, runs[i], runs[i + 1], names[runs[i + 2]], cpu, memory, gpus, tpus,
                                            held, user, band, gang, runs[i + 3])  # fmt: skip
                if held:
                    ported.add(key)


def unpack(data: bytes) -> SchedulerState:
    """The whole state `pack` wrote, at once (tests and tools; the workflow loads it in steps)."""
    loader = StateLoader(data)
    while not loader.step():
        pass
    return loader.state
