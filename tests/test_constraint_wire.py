"""A constraint keeps every field on every hop: client -> job workflow -> scheduler (signal, carry, snapshot) -> pass.

The hops are hand-written encoders (the request's proto, the enqueue's hand decoder, the carry's
JSON rows, the snapshot's spec parts, the reservation's rows): a field one of them drops would silently
turn `zone in a,b` into nothing, or a preference into a requirement. These tests push constraints
with every field set through all of them and compare what the pure scheduler receives.
"""

from __future__ import annotations

import dataclasses

import pytest
from temporalio.converter import DataConverter

from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.scheduling import decode_reservations, find_assignments_activity, snapshot_from_pb
from iris.client.submission import build_request
from iris.security.codec import data_converter
from iris.types import Constraint, ResourceSpec
from workflows.jobs.details import job_request_markdown
from workflows.jobs.job_reservation import reserve_request
from workflows.jobs.job_waves import scheduling_spec
from workflows.messages import ConstraintSpec, Enqueue, Reserve
from workflows.scheduler import reservation_state
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState
from workflows.scheduler.snapshot_cache import encode_snapshot

# Every field of Constraint set away from its default somewhere in the list, every op, every value type.
SENT = [
    Constraint("zone", "IN", ["us-east5-a", "us-east5-b"]),
    Constraint("rack", "NOT_IN", [3, 4.5]),
    Constraint("ssd", "IN", [True]),
    Constraint("pool", "EQ", "cpu"),
    Constraint("cores", "GE", 8),
    Constraint("ghz", "LT", 3.5),
    Constraint("flag", "NE", False),
    Constraint("gpu", "EXISTS"),
    Constraint("taint:spot", "NOT_EXISTS"),
    Constraint("pzone", "IN", ["b"], soft=True),
    Constraint("prack", "NOT_IN", [1, 2], soft=True),
    Constraint("ptype", "EQ", "v5e", soft=True),
    Constraint("pmem", "GT", 1, soft=True),
    Constraint("plocal", "EXISTS", soft=True),
]
CARRIED = ("key", "op", "value", "soft")


def test_every_field_of_a_constraint_is_known_to_this_test() -> None:
    """A new field on any of the three representations must be added to every hop and to SENT above."""
    assert CARRIED == tuple(f.name for f in dataclasses.fields(Constraint))
    assert CARRIED == tuple(f.name for f in dataclasses.fields(ConstraintSpec))
    assert {"key", "op", "value", "values", "soft"} == set(pb.Constraint.DESCRIPTOR.fields_by_name)
    request = build_request(constraints=SENT)
    assert {"key", "op", "value", "values", "soft"} == {f.name for c in request.constraints for f, _ in c.ListFields()}


def _typed(constraints: tuple[Constraint, ...]) -> list[tuple[object, ...]]:
    """Constraints with each value's type beside it (True == 1 == 1.0 in Python, not in a constraint)."""
    out: list[tuple[object, ...]] = []
    for c in constraints:
        values = c.value if isinstance(c.value, tuple) else (c.value,)
        out.append((c.key, c.op, tuple((type(v), v) for v in values), type(c.value), c.soft))
    return out


def _through_the_wire(message: object, cls: type) -> object:
    """What Temporal's default converter makes of a workflow input or signal argument."""
    converter = DataConverter.default.payload_converter
    return converter.from_payloads(converter.to_payloads([message]), [cls])[0]


def test_a_job_s_constraints_reach_the_pass_whole() -> None:
    """Submit -> job workflow's enqueue (scheduler's converter) -> continue-as-new carry -> snapshot -> PendingJob."""
    request = _through_the_wire(build_request(constraints=SENT, resources=ResourceSpec(replicas=2)), pb.JobRequest)
    assert isinstance(request, pb.JobRequest)
    spec = scheduling_spec(request)
    payload = DataConverter.default.payload_converter.to_payloads([Enqueue("ana/j", spec, {0: 0, 1: 0}, 3.0)])[0]
    enqueue = data_converter(None).payload_converter.from_payloads([payload], [Enqueue])[0]
    assert spec == enqueue.spec
    state = SchedulerState(store_url="memory://wire")
    state.pending["ana/j"] = PendingEntry("ana/j", enqueue.spec, enqueue.attempts, 3.0)
    carried = unpack(pack(state))
    assert state == carried
    _, jobs = snapshot_from_pb(pb.SchedulingSnapshot.FromString(compressed.decompress(encode_snapshot(carried, 10.0))))
    (job,) = jobs
    assert _typed(tuple(c for c in SENT if not c.soft)) == _typed(job.constraints)
    assert _typed(tuple(c for c in SENT if c.soft)) == _typed(job.preferences)


def test_a_reservation_s_constraints_reach_the_pass_whole() -> None:
    """Reservation constraints (IN / NOT_IN included) through the reserve signal, the carry and the snapshot."""
    hard = [c for c in SENT if not c.soft]
    request = build_request(constraints=[], reservation=[ResourceSpec(cpu=1)], reservation_constraints=hard)
    reserve = _through_the_wire(reserve_request("ana/j", request), Reserve)
    assert isinstance(reserve, Reserve)
    state = SchedulerState(store_url="memory://wire")
    held = reservation_state.from_request(reserve, "rsv-ana/j", 1.0)
    state.reservations[held.reservation_id] = held
    state = unpack(pack(state))  # carried through continue-as-new
    snap = pb.SchedulingSnapshot()
    reservation_state.encode(snap, state, 2.0)
    (reservation,) = decode_reservations(snap)
    assert _typed(tuple(hard)) == _typed(reservation.constraints)


def test_a_reservation_cannot_be_soft() -> None:
    """A reservation is held where it must be: a soft reservation constraint is refused, naming the field."""
    with pytest.raises(ValueError, match=r"reservation_constraints\[0\]: .*soft"):
        build_request(reservation=[ResourceSpec(cpu=1)], reservation_constraints=[SENT[-1]])


def test_the_temporal_ui_shows_lists_and_preferences() -> None:
    """The job's description in the Temporal UI reads `zone in a, b` and marks a preference."""
    text = job_request_markdown(build_request(constraints=[SENT[0], SENT[9]]))
    assert "`zone in us-east5-a, us-east5-b`" in text
    assert "`pzone in b` (preferred)" in text


def test_a_job_stored_before_the_key_rule_is_still_scheduled() -> None:
    """A job stored with a key the rule now refuses ("zone in", from `-c "zone in $UNSET"`), or coscheduled by
    one, does not stop the pass: it pends with a reason naming the key, and other jobs are placed."""
    snap = pb.SchedulingSnapshot(now=10.0)
    row = pb.WorkerRow(worker_id="w0", cpu_millis=4000, memory_bytes=2**32)
    row.attributes["zone"].string_value = "a"
    snap.fleet.rows.append(row.SerializeToString())
    fleet = snap.fleet
    for column in (fleet.used_cpu_millis, fleet.used_memory_bytes, fleet.used_gpus, fleet.used_tpus):
        column.append(0)
    stuck = snap.queue.specs.add(request=pb.Resources(cpu_millis=100, memory_bytes=2**20))
    stuck.constraints.add(key="zone in", op="EXISTS")
    snap.queue.specs.add(request=pb.Resources(cpu_millis=100), group_by="my key")
    snap.queue.specs.add(request=pb.Resources(cpu_millis=100, memory_bytes=2**20))
    for at, (job_id, tasks) in enumerate([("ana/old", [0]), ("ana/gang", [0, 1]), ("ana/new", [0])]):
        q = snap.queue
        q.job_ids.append(job_id)
        q.spec.append(at)
        q.task_counts.append(len(tasks))
        q.task_indices.extend(tasks)
        q.submitted_at.append(float(at))
        q.reason_crc.append(0)
        q.placed.append(0)
        q.room_at.append(0.0)
    plan = pb.SchedulingPlan.FromString(
        compressed.decompress(find_assignments_activity(compressed.compress(snap.SerializeToString())))
    )
    assert ["ana/new"] == [a.job_id for a in plan.assignments]
    assert "zone in" in plan.pending_reasons["ana/old"]
    assert "my key" in plan.pending_reasons["ana/gang"]
