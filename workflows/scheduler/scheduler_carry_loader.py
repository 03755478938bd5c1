"""How a scheduler run loads, a step at a time, the state its predecessor packed (scheduler_carry.py).

The header (the carry's first zlib stream) and the placements (the second: protobuf messages, parsed in
milliseconds) are read at once; the chunk lines are decompressed only as each step reads them, so no step holds
the whole carry. Pure functions of the carry (no Temporal calls): the same code runs in the workflow and in tests.
"""

from __future__ import annotations

import json
import zlib
from collections import deque
from typing import Any

from activities.contracts.dataclass_json import Plan, plan_for
from workflows.scheduler.placement_index import Placements
from workflows.scheduler.scheduler_actions import new_ring
from workflows.scheduler.scheduler_carry_schema import CarryChunk, CarryHeader
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

    The header (the first stream: actions, books, reservations, counts) and the placements (the second)
    are read at once; workers, then the queue with its reasons come chunk by chunk, in the order they were
    packed, so the queue keeps its FIFO order. Each step decompresses only the lines it reads.
    """

    def __init__(self, data: bytes) -> None:
        first = zlib.decompressobj()
        head = first.decompress(data)
        try:
            header: CarryHeader = _read_header(json.loads(head))
        except (TypeError, ValueError, KeyError) as e:  # not a carry this build can read: say so, not a traceback
            raise ValueError(f"the packed scheduler state's header does not read as a CarryHeader: {e}") from e
        if not header.placements_stream:
            raise ValueError("the packed scheduler state is from a build that carried placements as JSON rows")
        second = zlib.decompressobj()
        placements = Placements.from_carried(second.decompress(first.unused_data))
        self._rest = second.unused_data  # the chunks' stream
        self._z: Any = zlib.decompressobj()
        self._lines: deque[bytes] = deque()
        self._tail = b""  # the start of a line not decompressed whole yet
        self._step = max(1, header.step)
        self.counts = header.counts
        self.small = header.weight <= self._step  # loads in one step
        self.state = state = SchedulerState(
            store_url=header.store_url, pending_reasons=header.reasons, port_cursors=header.port_cursors,
            books=Books.from_carried(header.books),
        )  # fmt: skip
        state.placements, state.ported = placements, set(placements.holding_ports())
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
        pending = state.pending
        for job_id in chunk.queued_gone:
            del pending[job_id]
        reasons = state.pending_reasons
        for job_id in chunk.reasons_gone:
            del reasons[job_id]
        reasons.update(chunk.reasons)
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


def unpack(data: bytes) -> SchedulerState:
    """The whole state `pack` wrote, at once (tests and tools; the workflow loads it in steps)."""
    loader = StateLoader(data)
    while not loader.step():
        pass
    return loader.state
