"""The state a scheduler run hands to the next (continue-as-new), packed and loaded whole, in one workflow task.

The bulk of the state is protobuf messages the run keeps as they are (placements: placement_index; workers:
`WorkerEntry` views of their rows) or columns written in one go (the queue), so packing is serializing them
and loading is parsing them: milliseconds, no Python object per placement (DESIGN.md decision 3). The carry is
four compressed frames, one after the other (activities/proto/compressed.py):

1. the header (`CarryHeader`, scheduler_carry_schema: the store, accounts and sharing settings, reservations,
   the actions log, port cursors, answers still owed), written and read by the one message codec
   (activities/contracts/dataclass_json.py);
2. the placements, `pb.PlacedState`;
3. the workers, `pb.WorkerRows`, in their order (written as `pb.SerializedWorkerRows`, the same on the wire, from the
   rows each entry keeps serialized);
4. the queue, `pb.QueueRows`: FIFO, each job's spec once per distinct spec (the codec's JSON), its waiting
   tasks and why it waits.

Pure functions of the state (no Temporal calls): the same code runs in the workflow and in tests.
"""

from __future__ import annotations

import json
from itertools import chain, islice
from operator import attrgetter, countOf

from google.protobuf.message import DecodeError

from activities.contracts.dataclass_json import Plan, plan_for, to_plain
from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from workflows.fleet.worker_lifecycle import WorkerState
from workflows.messages import SchedulingSpec
from workflows.scheduler.placement_index import Placements
from workflows.scheduler.scheduler_actions import new_ring
from workflows.scheduler.scheduler_carry_schema import CarryHeader
from workflows.scheduler.scheduler_state import ROW_BYTES, PendingEntry, SchedulerState, WorkerEntry, pass_rows
from workflows.scheduler.sharing_state import Books


def _reader(cls: type) -> Plan:
    plan = plan_for(cls)
    if plan is None:
        raise TypeError(f"{cls.__name__} must be decoded by plan (activities/contracts/dataclass_json.py)")
    return plan


_read_header = _reader(CarryHeader)
_read_spec = _reader(SchedulingSpec)
_ATTEMPTS = attrgetter("attempts")
_ROW_STATE = attrgetter("row.state")
_WORKER_ID = attrgetter("worker_id")
STREAMS = ("header", "placements", "workers", "queue")  # the carry's frames, in order


def counts(state: SchedulerState) -> list[int]:
    """Healthy and all workers, pending and running tasks: what a run that handed its state over still answers."""
    workers = state.workers
    # The rows' own strings: a WorkerState made for each of 30,000 workers took ~40 ms of the closing task.
    healthy = len(workers) - countOf(map(_ROW_STATE, workers.values()), WorkerState.LOST)
    return [healthy, len(workers), sum(map(len, map(_ATTEMPTS, state.pending.values()))), len(state.placements)]


def carried_items(state: SchedulerState) -> int:
    """Workers, pending and running tasks: what a pack's time grows with."""
    _, workers, pending, running = counts(state)
    return workers + pending + running


def _queue(state: SchedulerState) -> pb.QueueRows:
    """The queue as columns; a spec shared by several jobs (by identity, or equal as written) is written once."""
    out = pb.QueueRows()
    entries = list(state.pending.values())
    by_id: dict[int, int] = {}
    by_text: dict[bytes, int] = {}
    positions = []
    for e in entries:
        i = by_id.get(id(e.spec))
        if i is None:
            text = json.dumps(to_plain(e.spec), separators=(",", ":")).encode()
            i = by_id[id(e.spec)] = by_text.setdefault(text, len(by_text))
        positions.append(i)
    out.specs.extend(by_text)
    out.job_ids.extend(e.job_id for e in entries)
    out.spec.extend(positions)
    out.submitted_at.extend(e.submitted_at for e in entries)
    out.room_at.extend(e.room_at for e in entries)
    out.tasks.extend(map(len, map(_ATTEMPTS, entries)))
    waiting = list(map(_ATTEMPTS, entries))  # one extend a column: an extend a job cost ~1.5 us of call each
    out.task_indices.extend(chain.from_iterable(waiting))
    out.attempts.extend(chain.from_iterable(map(dict.values, waiting)))
    reasons = state.pending_reasons
    out.reason_job_ids.extend(reasons)
    out.reasons.extend(reasons.values())
    return out


def pack(state: SchedulerState) -> bytes:
    """The state as four compressed frames: the header, the placements, the workers, the queue."""
    header = CarryHeader(
        store_url=state.store_url,
        actions=list(state.actions),
        port_cursors=state.port_cursors,
        books=state.books.carried(),
        reservations=list(state.reservations.values()),
        replies=list(state.replies),
    )
    # The rows as their entries keep them serialized for passes (most made by a pass already): copying 30,000 rows
    # into a WorkerRows to serialize them took 30-45 ms of the closing task.
    workers = pb.SerializedWorkerRows(workers=list(map(ROW_BYTES, pass_rows(state.workers.values()))))
    streams = (
        json.dumps(to_plain(header), separators=(",", ":")).encode(),
        state.placements.carried(),
        workers.SerializeToString(),
        _queue(state).SerializeToString(),
    )
    return b"".join(map(compressed.compress, streams))


def unpack(data: bytes) -> SchedulerState:
    """The state `pack` wrote."""
    head, placed, workers, queue = compressed.split(data, STREAMS, "packed scheduler state")
    try:
        header: CarryHeader = _read_header(json.loads(head))
    except (TypeError, ValueError, KeyError) as e:  # not a carry this build can read: say so, not a traceback
        raise ValueError(f"the packed scheduler state's header does not read as a CarryHeader: {e}") from e
    state = SchedulerState(store_url=header.store_url, port_cursors=header.port_cursors,
                           books=Books.from_carried(header.books))  # fmt: skip
    state.actions = new_ring(header.actions)
    for held in header.reservations:
        state.reservations[held.reservation_id] = held
    state.replies = header.replies
    state.placements = Placements.from_carried(placed)
    state.ported = set(state.placements.holding_ports())
    try:
        rows = pb.WorkerRows.FromString(workers)
        columns = pb.QueueRows.FromString(queue)
    except DecodeError as e:
        raise ValueError(f"the packed scheduler state's workers or queue do not parse: {e}") from e
    views = list(map(WorkerEntry.of, rows.workers))
    state.workers = dict(zip(map(_WORKER_ID, views), views, strict=True))
    _load_queue(state, columns)
    return state


def _load_queue(state: SchedulerState, q: pb.QueueRows) -> None:
    n = len(q.job_ids)
    if not n == len(q.spec) == len(q.submitted_at) == len(q.room_at) == len(q.tasks):
        raise ValueError(f"the carried queue's columns have different lengths ({n} jobs)")
    if sum(q.tasks) != len(q.task_indices) or len(q.task_indices) != len(q.attempts):
        raise ValueError("the carried queue's tasks do not add up to its task columns")
    try:
        specs: list[SchedulingSpec] = [_read_spec(json.loads(text)) for text in q.specs]
    except (TypeError, ValueError, KeyError) as e:
        raise ValueError(f"a carried queued job's spec does not read as a SchedulingSpec: {e}") from e
    if q.spec and not 0 <= min(q.spec) <= max(q.spec) < len(specs):
        raise ValueError(f"the carried queue names specs it does not hold ({len(specs)} held)")
    # Each job's waiting tasks are the next `tasks` pairs of one iterator; the entries made by one map: 25-27 ms for
    # 15,000 jobs of 10 tasks, against 35 ms for a loop slicing two lists per job.
    pairs = zip(list(q.task_indices), list(q.attempts), strict=True)
    waiting = [dict(islice(pairs, tasks)) for tasks in q.tasks]
    job_ids = list(q.job_ids)
    entries = map(PendingEntry, job_ids, map(specs.__getitem__, q.spec), waiting, q.submitted_at, q.room_at)
    state.pending = dict(zip(job_ids, entries, strict=True))
    state.pending_reasons = dict(zip(q.reason_job_ids, q.reasons, strict=True))
