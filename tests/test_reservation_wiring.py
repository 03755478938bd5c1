"""Reservations between the client, the scheduler workflow's state and the pure scheduler (no server)."""

from __future__ import annotations

import re

import pytest

from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.scheduling import decode_reservations, encode_plan, snapshot_from_pb
from iris import Constraint, ResourceSpec
from iris.cli.reservation_commands import _rows, parse_reserve
from iris.client.reservation_requests import parse_published
from iris.client.submission import build_request
from scheduler import find_assignments
from workflows.messages import ConstraintSpec, Reserve
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.reservation_state import Book, apply_holds, from_request, lose_workers, view
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_state import SchedulerState, WorkerEntry
from workflows.scheduler.snapshot_cache import encode_snapshot

GIB = 1 << 30


def _state(workers: int = 4) -> SchedulerState:
    state = SchedulerState()
    for i in range(workers):
        state.workers[f"w{i}"] = WorkerEntry(f"w{i}", "s", 1000, GIB, 0, 0, {"pool": "rsv"})
    return state


def _reserve(state: SchedulerState, job_id: str = "p", entries: int = 2) -> None:
    request = Reserve(job_id, [[1000, GIB, 0, 0]] * entries, [ConstraintSpec("pool", "EQ", "rsv")], [], "ana")
    state.reservations[f"rsv-{job_id}"] = from_request(request, f"rsv-{job_id}", 100.0)


def _pass(state: SchedulerState) -> pb.SchedulingPlan:
    """One pass as the workflow and the activity do it: encode, schedule, decode the plan."""
    snap = pb.SchedulingSnapshot.FromString(compressed.decompress(encode_snapshot(state, 110.0)))
    workers, jobs = snapshot_from_pb(snap)
    result = find_assignments(workers, jobs, reservations=decode_reservations(snap))
    return pb.SchedulingPlan.FromString(compressed.decompress(encode_plan(result)))


def test_state_with_reservations_packs_and_comes_back() -> None:
    """Held and lost entries, reasons and times survive continue-as-new; a state without any packs as before."""
    state = _state()
    _reserve(state)
    r = state.reservations["rsv-p"]
    r.held, r.lost, r.reason, r.held_at = {0: "w0"}, {1: "w9"}, "entry 1 waits", 105.0
    assert state == unpack(pack(state))
    plain = _state()
    assert b"\"rsv\":" not in compressed.decompress(pack(plain))


def test_a_pass_holds_the_reservation_and_the_commit_book_keeps_it() -> None:
    """Held on two workers by a pass; then outside work cannot be booked there, the tree only up to what it holds."""
    state = _state()
    _reserve(state)
    plan = _pass(state)
    assert apply_holds(state, plan, 120.0)
    held = set(state.reservations["rsv-p"].held.values())
    assert 2 == len(held)
    book = Book(state)
    worker = next(iter(held))
    capacity = (1000, GIB, 0, 0)
    assert not book.place("outsider", worker, (500, 0, 0, 0), capacity)
    assert book.place("p/child", worker, (1000, GIB, 0, 0), capacity)
    assert not book.place("p/child2", worker, (1, 0, 0, 0), capacity)
    assert "rsv-p" == book.reservation_of("p/child/grandchild") == book.reservation_of("p")
    assert "" == book.reservation_of("q/child")
    free = next(w for w in state.workers if w not in held)
    assert book.place("outsider", free, (1000, GIB, 0, 0), capacity)


def test_hold_that_no_longer_fits_is_not_taken() -> None:
    """A first hold is taken whole or not at all: a worker filled while the pass ran refuses it."""
    state = _state(2)
    _reserve(state)
    plan = _pass(state)
    state.placements["x/task-0"] = Placement("x", 0, 0, plan.reservation_holds[0].worker_id, 1000, GIB, 0, 0)
    apply_holds(state, plan, 120.0)
    assert {} == state.reservations["rsv-p"].held


def test_lost_worker_is_replaced_in_a_later_pass() -> None:
    """Entries on a lost worker wait for a replacement, listed as such, and a pass holds them elsewhere."""
    state = _state(3)
    _reserve(state)
    apply_holds(state, _pass(state), 120.0)
    r = state.reservations["rsv-p"]
    lost = r.held[0]
    state.workers[lost].state = state.workers[lost].state.__class__("LOST")
    assert lose_workers(state, {lost})
    shown = parse_published(view(state))[0]
    assert (lost,) == shown.lost_workers and shown.awaiting_replacement
    apply_holds(state, _pass(state), 130.0)
    assert 2 == len(r.held) and lost not in r.held.values() and {} == r.lost


def test_published_view_reads_back_with_used_and_free() -> None:
    """The memo's view names the reservation, its job, its workers with held and used capacity."""
    state = _state()
    _reserve(state)
    apply_holds(state, _pass(state), 120.0)
    worker = state.reservations["rsv-p"].held[0]
    state.placements["p/c/task-0"] = Placement("p/c", 0, 0, worker, 500, GIB // 2, 0, 0)
    [shown] = parse_published(view(state))
    assert ("rsv-p", "p", "HELD", 2, 2) == (shown.reservation_id, shown.job_id, shown.state, shown.entries, shown.held)
    used = {w.worker_id: (w.used_cpu, w.used_memory_bytes) for w in shown.workers}
    assert (0.5, GIB // 2) == used[worker]
    rows = _rows(shown)
    assert ("rsv-p", "p", "HELD 2/2") == rows[0][:3]
    assert any(row[3] == worker and row[4] == "0.5 cpu, 512Mi" and row[5] == "0.5 cpu, 512Mi" for row in rows)


def test_submit_validates_reservations_naming_the_field() -> None:
    """A ResourceSpec with replicas is that many entries; bad values are one-line errors naming the field."""
    req = build_request(reservation=[ResourceSpec(cpu=2, memory="2g", replicas=3)],
                        reservation_constraints=[Constraint("pool", "EQ", "rsv")])  # fmt: skip
    assert [2000] * 3 == [r.cpu_millis for r in req.reservation]
    assert ["pool"] == [c.key for c in req.reservation_constraints]
    tpu = build_request(reservation=[ResourceSpec(tpu="v5e-16", replicas=4)])
    assert [("tpu-topology", "v5e-16")] == [(c.key, c.value.string_value) for c in tpu.reservation_constraints]
    for options, field in [
        (dict(reservation="cpu=1"), "reservation must be"),
        (dict(reservation=[{"cpu": 1}]), "reservation[0] must be a ResourceSpec"),
        (dict(reservation=[ResourceSpec(cpu=0, memory=0)]), "reservation[0] reserves nothing"),
        (dict(reservation_constraints=[Constraint("a", "EXISTS")]), "reservation_constraints: given without"),
        (dict(reservation=[ResourceSpec()], reservation_constraints=["zone=a"]), "reservation_constraints[0]"),
        (dict(reservation=[ResourceSpec(replicas=1001)]), "reservation: at most 1000"),
        (dict(reservation=[ResourceSpec(tpu="v5e-16"), ResourceSpec(tpu="v4-8")]),
         "reservation: every entry must name the same tpu variant"),
    ]:
        with pytest.raises(ValueError, match="^" + re.escape(field)):
            build_request(**options)  # type: ignore[arg-type]


def test_submit_inside_a_reservation_refuses_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reservations do not nest: a task of a reservation's tree cannot submit a reserving job."""
    monkeypatch.setenv("IRIS_RESERVATION_ID", "rsv-p")
    with pytest.raises(ValueError, match=r"^reservation: this job would run inside reservation rsv-p"):
        build_request(reservation=[ResourceSpec()])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("cpu=4,memory=16gx2", (4000, 16 * GIB, 0, 2)),
        ("cpu=0.5", (500, GIB, 0, 1)),
        ("memory=2g,gpus=1x3", (1000, 2 * GIB, 1, 3)),
    ],
)
def test_reserve_flag_syntax(spec: str, expected: tuple[int, int, int, int]) -> None:
    """`--reserve KEY=VALUE,...[xN]`: keys left out take the job defaults; xN repeats the entry."""
    parsed = parse_reserve(spec)
    assert expected == (parsed.cpu_millis, parsed.memory_bytes, parsed.gpus, parsed.replicas)


@pytest.mark.parametrize("spec", ["cpu", "foo=1", "cpu=1,cpu=2", "x2", "cpu=abc", "gpus=z", "cpu=1x0"])
def test_bad_reserve_flag_names_it(spec: str) -> None:
    """A bad --reserve is a one-line error starting with the flag and the spec."""
    with pytest.raises(ValueError, match=r"^--reserve "):
        parse_reserve(spec)
