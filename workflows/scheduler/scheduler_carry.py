"""The state a scheduler run hands to the next (continue-as-new): how it is packed, over several tasks.

At 10,000 workers and 100,000 pending or placed tasks the state is ~200,000 Python objects: building
them in one workflow task took ~1 s (and 1.4 s under load, near the SDK's 2 s deadlock detector). So
`pack` writes three zlib streams: the `CarryHeader` (what is not chunked, and the counts the `summary`
query answers while the rest loads), the placements (`pb.PlacedState`, serialized whole at the end:
placement_index keeps them as messages), then JSON lines, each a message of scheduler_carry_schema
(`CarryChunk`: workers, queued jobs with their reasons, of a bounded weight; the last chunk with what
changed while they were packed). The next run loads it a few chunks
per workflow task (scheduler_carry_loader): the scheduler loads `step` weight units, awaits a no-op
activity (a new workflow task), loads the next, and so on, holding the signals that arrive meanwhile
(scheduler_workflow). A small state loads in the first task.

The messages are written and read by the plans of the one message codec
(activities/contracts/dataclass_json.py): a field is carried the moment it is declared, and a carry from
a build with fewer fields reads with their defaults (no version number, no positional rows).

Pure functions of the state (no Temporal calls): the same code runs in the workflow and in tests.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from itertools import compress, filterfalse
from operator import attrgetter, countOf, is_not, ne, or_
from typing import Any

from activities.contracts.dataclass_json import to_plain
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.scheduler.scheduler_carry_schema import CarryChunk, CarryHeader
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry

# Weight units a run loads (or packs) per workflow task. A unit is ~4.5 us of CPU in a plain process
# (what loading a placement cost when they were objects); a worker costs WORKER units, a queued job
# QUEUED plus its attempts / ATTEMPTS_PER_UNIT (measured at 30,000 workers x 300,000 tasks: most of a
# job's cost is its spec).
# LOAD_STEP units took ~40 ms of CPU in a plain process, up to ~5x that in the sandbox on a loaded
# machine. A state of less weight loads (and packs) in one task.
LOAD_STEP = 8_000
CHUNK = 2_000  # weight units per chunk line: a step loads whole chunks
WORKER = 4
QUEUED = 4
ATTEMPTS_PER_UNIT = 8


def _line(message: CarryChunk | CarryHeader) -> str:
    return json.dumps(to_plain(message), separators=(",", ":"))


def _chunks(rows: Iterator[tuple[int, Any]], chunk: int, make: Callable[[int, list[Any]], CarryChunk]) -> Iterator[str]:
    """Lines of `CarryChunk`s made of the rows (`make(weight, rows)`), each of about `chunk` weight."""
    batch: list[Any] = []
    weight = 0
    for w, row in rows:
        batch.append(row)
        weight += w
        if weight >= chunk:
            yield _line(make(weight, batch))
            batch, weight = [], 0
    if batch:
        yield _line(make(weight, batch))


def _workers_chunk(weight: int, rows: list[Any]) -> CarryChunk:
    return CarryChunk(weight, workers=rows)


def _queued_weight(attempts: int) -> int:
    return QUEUED + attempts // ATTEMPTS_PER_UNIT


def _queued_rows(entries: Iterable[tuple[PendingEntry, dict[int, int]]], chunk: int) -> Iterator[tuple[int, Any]]:
    """A job per row; a job with more attempts than a chunk holds is split over several rows."""
    per_row = chunk * ATTEMPTS_PER_UNIT
    for e, attempts in entries:
        items = list(attempts.items())
        for start in range(0, max(1, len(items)), per_row):
            part = dict(items[start : start + per_row])
            yield _queued_weight(len(part)), PendingEntry(e.job_id, e.spec, part, e.submitted_at)




class Packer:
    """Packs the state over several workflow tasks while the run goes on, then adds what changed meanwhile.

    Packing 10,000 workers, 100,000 placements and a queue of 100,000 tasks took ~0.25 s of CPU: too
    much for the one workflow task that continues as new. So the run packs `step` weight per `step()`,
    one workflow task each, while signals keep changing the live state: the workers (each copied as it
    is packed), then the queue in its order at the start (each job's attempts and reason copied as it is
    packed), compressing as it goes. `finish()` adds a line with what changed since each was packed
    (workers, queued jobs and their reasons added, replaced or gone, found by comparisons that run in C),
    serializes the placements as they are then (messages already: milliseconds, placement_index), and
    puts the header first. Loaded in order, the lines give the live state.
    """

    def __init__(self, state: SchedulerState, step: int = LOAD_STEP, chunk: int = CHUNK) -> None:
        self._step, self._chunk = step, chunk
        self._state = state
        self._w_keys = list(state.workers)
        self._workers: dict[str, dict[str, Any]] = {}  # worker id -> its entry's attributes as packed
        self._queue = dict(state.pending)  # the queue's order, and each entry, as the packing started
        self._entries: dict[str, PendingEntry] = {}  # job id -> its entry, as packed
        self._attempts: dict[str, dict[int, int]] = {}  # job id -> its attempts, as packed
        self._reasons: dict[str, str] = {}  # job id -> its reason as packed
        self._q_keys = list(self._queue)
        self._w_at = self._q_at = 0
        self._weight = 0  # of the lines packed so far
        self._z = zlib.compressobj(1)  # level 1: 3x faster than 6, ~15% bigger
        self._packed: list[bytes] = []  # compressed so far
        self.steps = 0  # steps taken so far
        self.counts: list[int] = []  # the header's counts, once finished

    def _add(self, lines: Iterable[str]) -> None:
        self._packed += [self._z.compress(line.encode() + b"\n") for line in lines]

    def _queued_chunk(self, weight: int, rows: list[Any]) -> CarryChunk:
        reasons = self._reasons
        waiting = {r.job_id: reasons[r.job_id] for r in rows if r.job_id in reasons}
        return CarryChunk(weight, queued=rows, reasons=waiting)

    def step(self) -> bool:
        """Pack about `step` weight (workers, then the queue); True once all is packed."""
        room = self._step
        self.steps += 1
        if self._w_at < len(self._w_keys):
            end = min(len(self._w_keys), self._w_at + max(1, room // WORKER))
            live, frozen = self._state.workers, self._workers
            rows = []
            for key in self._w_keys[self._w_at : end]:
                worker = live.get(key)
                if worker is not None:  # gone before its turn: not packed, and not "gone" at the finish
                    frozen[key] = copied = dict(worker.__dict__)
                    copied["attributes"] = dict(worker.attributes)  # compared at the finish, even if changed in place
                    rows.append((WORKER, WorkerEntry(**copied)))
            self._add(_chunks(iter(rows), self._chunk, _workers_chunk))
            room -= WORKER * (end - self._w_at)
            self._weight += WORKER * len(rows)
            self._w_at = end
        if room > 0 and self._q_at < len(self._q_keys):
            end = self._q_at
            used = 0
            queue, entries, attempts, reasons = self._queue, self._entries, self._attempts, self._reasons
            live_reasons = self._state.pending_reasons
            while end < len(self._q_keys) and used < room:
                job_id = self._q_keys[end]
                entries[job_id] = e = queue[job_id]  # a job gone from the live queue meanwhile: "gone" at the finish
                attempts[job_id] = dict(e.attempts)
                reason = live_reasons.get(job_id)
                if reason is not None:
                    reasons[job_id] = reason
                used += _queued_weight(len(e.attempts))
                end += 1
            packing = ((entries[job_id], attempts[job_id]) for job_id in self._q_keys[self._q_at : end])
            self._add(_chunks(_queued_rows(packing, self._chunk), self._chunk, self._queued_chunk))
            self._q_at = end
            self._weight += used
            room -= used
        return self._w_at >= len(self._w_keys) and self._q_at >= len(self._q_keys)

    def finish(self, state: SchedulerState) -> bytes:
        """The packed state: the header, the placements, the lines packed by the steps, and what changed since."""
        while not self.step():
            pass
        live_x = state.placements
        live_q, entries = state.pending, self._entries
        gone_q = list(compress(entries, map(is_not, map(live_q.get, entries), entries.values())))
        # A job enqueued or replaced meanwhile (not the entry packed), or whose attempts changed.
        replaced = map(is_not, map(entries.get, live_q), live_q.values())
        changed = compress(
            live_q.values(),
            map(or_, replaced, map(ne, map(self._attempts.get, live_q), map(_ATTEMPTS, live_q.values()))),
        )
        changed_q = [(e, e.attempts) for e in changed]
        live_r, frozen_r = state.pending_reasons, self._reasons
        changed_r = {
            job_id: live_r[job_id] for job_id in compress(live_r, map(ne, map(frozen_r.get, live_r), live_r.values()))
        }
        gone_r = list(filterfalse(live_r.__contains__, frozen_r))
        live_w, frozen_w = state.workers, self._workers
        gone_w = list(filterfalse(live_w.__contains__, frozen_w))
        changed_w = list(compress(live_w, map(ne, map(frozen_w.get, live_w), map(_DICT, live_w.values()))))
        # The loader keeps the packed order and adds new workers last; say the order when the run changed it.
        new_w = list(filterfalse(frozen_w.__contains__, changed_w))
        same_order = list(filter(live_w.__contains__, frozen_w)) + new_w == list(live_w)
        changes = CarryChunk(
            0, [WorkerEntry(**live_w[key].__dict__) for key in changed_w],
            [row for _, row in _queued_rows(changed_q, len(changed_q) * ATTEMPTS_PER_UNIT + ATTEMPTS_PER_UNIT)],
            changes=True, queued_gone=gone_q, workers_gone=gone_w,
            worker_order=[] if same_order else list(live_w), reasons=changed_r, reasons_gone=gone_r,
        )  # fmt: skip
        changes.weight = QUEUED * (len(gone_q) + len(changed_q)) + len(gone_w) + WORKER * len(changed_w)
        healthy = len(live_w) - countOf(map(_STATE, live_w.values()), WorkerState.LOST)
        header = CarryHeader(
            step=self._step,
            weight=self._weight + changes.weight,
            counts=[healthy, len(live_w), sum(map(len, map(_ATTEMPTS, live_q.values()))), len(live_x)],
            store_url=state.store_url,
            actions=list(state.actions),
            port_cursors=state.port_cursors,
            books=state.books.carried(),
            reservations=list(state.reservations.values()),
            placements_stream=True,
        )
        self.counts = header.counts
        self._add([_line(changes)])
        head = zlib.compress(_line(header).encode() + b"\n", 1)
        placed = zlib.compress(live_x.carried(), 1)
        return b"".join([head, placed, *self._packed, self._z.flush()])


_DICT = attrgetter("__dict__")
_STATE = attrgetter("state")
_ATTEMPTS = attrgetter("attempts")


def pack(state: SchedulerState, step: int = LOAD_STEP, chunk: int = CHUNK) -> bytes:
    """The state as three zlib streams: the header, the placements, then chunks the next run loads `step`
    weight at a time.

    `step` and `chunk` are arguments so a test can make a small state load in many steps. At once (tests
    and tools); the workflow packs with a `Packer`, over several workflow tasks.
    """
    return Packer(state, step, chunk).finish(state)
