"""How a scheduler run loads, a step at a time, the state its predecessor packed (scheduler_carry.py).

The header (the carry's first zlib stream) is read at once; the chunk lines are decompressed only as each step
reads them, so no step holds the whole carry. A carry in the layout before (one stream, the header its last line)
still loads. Pure functions of the carry (no Temporal calls): the same code runs in the workflow and in tests.
"""

from __future__ import annotations

import json
import zlib
from collections import deque
from collections.abc import Iterable, Mapping
from itertools import compress, repeat
from typing import Any

from activities.contracts import task_workflow_ids
from activities.contracts.dataclass_json import Plan, plan_for
from workflows.scheduler.placement_index import NO_PORTS, Placement
from workflows.scheduler.scheduler_actions import new_ring
from workflows.scheduler.scheduler_carry_schema import CarryChunk, CarryHeader, PlacedRuns
from workflows.scheduler.scheduler_state import SchedulerState
from workflows.scheduler.sharing_state import Books

READ = 1 << 18  # bytes of JSON a loading step decompresses at a time (the whole carry is ~100 bytes a task)


def _reader(cls: type) -> Plan:
    plan = plan_for(cls)
    if plan is None:
        raise TypeError(f"{cls.__name__} must be decoded by plan (activities/contracts/dataclass_json.py)")
    return plan


_read_chunk = _reader(CarryChunk)
_read_header = _reader(CarryHeader)


class StateLoader:
    """Builds the state `pack` wrote, `step()` by `step()`; `state` is usable (partly filled) throughout.

    The header (the first stream: names, actions, books, reservations, counts) is read at once; workers,
    then the queue with its reasons, then placements come chunk by chunk, in the order they were packed,
    so the queue keeps its FIFO order and a placement's ports (in the header) are set when the placement
    is built. Each step decompresses only the lines it reads.
    """

    def __init__(self, data: bytes) -> None:
        first = zlib.decompressobj()
        head = first.decompress(data)
        self._rest = first.unused_data  # the chunks' stream
        self._z: Any = zlib.decompressobj() if self._rest else None
        self._lines: deque[bytes] = deque()
        self._tail = b""  # the start of a line not decompressed whole yet
        if self._z is None:  # one stream: a build before wrote the header as its last line
            lines = head.split(b"\n")
            head = lines.pop()
            self._lines.extend(lines)
        try:
            header: CarryHeader = _read_header(json.loads(head))
        except (TypeError, ValueError, KeyError) as e:  # not a carry this build can read: say so, not a traceback
            raise ValueError(f"the packed scheduler state's header does not read as a CarryHeader: {e}") from e
        self._step = max(1, header.step)
        self._names = header.names  # those named after the packing started; the first lines list the others
        self._named = 0  # names those lines have listed so far
        self._ports = header.ports
        self.counts = header.counts
        self.small = header.weight <= self._step  # loads in one step
        self.state = state = SchedulerState(
            store_url=header.store_url, pending_reasons=header.reasons, port_cursors=header.port_cursors,
            books=Books.from_carried(header.books),
        )  # fmt: skip
        state.actions = new_ring(header.actions)
        for held in header.reservations:
            state.reservations[held.reservation_id] = held
        self.steps = 0  # steps taken so far
        self._fill()

    def _fill(self) -> None:
        """Decompress until a whole line waits to be read or the carry is all read."""
        z = self._z
        while not self._lines and z is not None:
            out = z.decompress(self._rest, READ)
            self._rest = z.unconsumed_tail
            if z.eof:
                self._z = z = None
            elif not (out or self._rest):
                raise ValueError("the packed scheduler state is cut short: its last chunk does not end")
            lines = (self._tail + out).split(b"\n")
            self._tail = lines.pop()
            if z is None and self._tail:
                lines.append(self._tail)
            self._lines.extend(lines)

    @property
    def done(self) -> bool:
        return not self._lines

    def step(self) -> bool:
        """Load chunks until `step` weight units are loaded (at least one chunk); True once all is loaded."""
        loaded = 0
        while not self.done and loaded < self._step:
            chunk: CarryChunk = _read_chunk(json.loads(self._lines.popleft()))
            self._fill()
            loaded += chunk.weight
            self._load(chunk)
        self.steps += 1
        return self.done

    def _load(self, chunk: CarryChunk) -> None:
        """A chunk's rows; for the last one (`changes`), what is gone first, then what was added or replaced."""
        state = self.state
        for key in chunk.placements_gone:
            del state.placements[key]
            state.ported.discard(key)
        pending = state.pending
        for job_id in chunk.queued_gone:
            del pending[job_id]
        reasons = state.pending_reasons
        for job_id in chunk.reasons_gone:
            del reasons[job_id]
        reasons.update(chunk.reasons)
        if chunk.names:
            self._names[self._named : self._named] = chunk.names
            self._named += len(chunk.names)
        workers = state.workers
        for worker_id in chunk.workers_gone:
            del workers[worker_id]
        for worker in chunk.workers:  # a changed worker keeps its place, a new one comes last
            workers[worker.worker_id] = worker
        if chunk.worker_order:
            state.workers = {worker_id: workers[worker_id] for worker_id in chunk.worker_order}
        for entry in chunk.queued:
            known = pending.get(entry.job_id)
            if known is None:
                pending[entry.job_id] = entry
            elif chunk.changes:  # the same job, its attempts changed: it keeps its place in the queue
                known.attempts = entry.attempts
            else:  # the rest of a job split over chunks
                known.attempts.update(entry.attempts)
        self._load_placed(chunk.placed)

    def _load_placed(self, rows: list[PlacedRuns]) -> None:
        """Each row's placements, built column by column in C (a row is one job's placements of one shape)."""
        names, ports, ported = self._names, self._ports, self.state.ported
        loaded: list[tuple[str, Placement]] = []
        for r in rows:
            n = len(r.task_indices)
            if not n == len(r.attempts) == len(r.workers) == len(r.placed_at):
                raise ValueError(f"the carried placements of job {r.job_id!r} have columns of different lengths")
            keys = list(task_workflow_ids(r.job_id, r.task_indices))
            held: Iterable[Mapping[str, int]] = repeat(NO_PORTS, n)
            if ports:
                held = [ports.get(key) or NO_PORTS for key in keys]
                ported.update(compress(keys, held))
            made = map(Placement, repeat(r.job_id, n), r.task_indices, r.attempts, map(names.__getitem__, r.workers),
                       repeat(r.cpu_millis), repeat(r.memory_bytes), repeat(r.gpus), repeat(r.tpus), held,
                       repeat(r.user), repeat(r.band), repeat(r.gang), r.placed_at)  # fmt: skip
            loaded += zip(keys, made, strict=True)
        self.state.placements.load(loaded)  # indexed as they are set (placement_index)


def unpack(data: bytes) -> SchedulerState:
    """The whole state `pack` wrote, at once (tests and tools; the workflow loads it in steps)."""
    loader = StateLoader(data)
    while not loader.step():
        pass
    return loader.state
