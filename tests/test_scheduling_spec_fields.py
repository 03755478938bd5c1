"""Every field of a job's scheduling request survives every hand-written encoding it passes through.

A `SchedulingSpec` passes several encoders (the enqueue signal's converter, the continue-as-new
carry, the pass's snapshot pieces and its reference encoder, the activity's decoder): a new field
that one of them drops is a request the scheduler silently ignores. These tests build a spec with
every field set to a value that is not its default, so a field added to the dataclass and left out
of any encoder fails here by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio.converter import DataConverter

from activities.contracts import task_workflow_id
from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.scheduling import jobs_from_pb
from iris.security.codec import data_converter
from workflows.messages import ConstraintSpec, Enqueue, SchedulingSpec
from workflows.scheduler.placement_index import Placement
from workflows.scheduler.scheduler_carry import pack, unpack
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.scheduler.snapshot_cache import encode_snapshot

# A value for each field, none of them the default (checked below, so a new field must be added here).
NON_DEFAULT: dict[str, Any] = {
    "cpu_millis": 1500,
    "memory_bytes": 3 << 30,
    "gpus": 2,
    "tpus": 4,
    "constraints": [ConstraintSpec("zone", "EQ", "z1")],
    "group_by": "",  # a gang is checked apart (it cannot carry max_concurrent)
    "priority": 7,
    "scheduling_timeout_seconds": 90.5,
    "tolerations": ["spot"],
    "num_groups": 1,
    "ports": ["http"],
    "coordinator": True,
    "band": "batch",
    "user": "ana",
    "max_concurrent": 3,
}
GANG: dict[str, Any] = {"group_by": "tpu-name", "num_groups": 2, "max_concurrent": 0}
# Fields the pass does not read (they shape what the task is given when placed, not where it goes).
NOT_IN_SNAPSHOT = {"ports", "coordinator"}


def _spec(**overrides: Any) -> SchedulingSpec:
    return SchedulingSpec(**{**NON_DEFAULT, **overrides})


def test_the_test_sets_every_field() -> None:
    """A field added to SchedulingSpec must get a value here (and so be checked through every encoder)."""
    names = [f.name for f in dataclasses.fields(SchedulingSpec)]
    assert sorted(names) == sorted(NON_DEFAULT)
    defaults = SchedulingSpec(cpu_millis=0, memory_bytes=0)
    plain, gang = _spec(), _spec(**GANG)
    for name in names:
        if name in ("cpu_millis", "memory_bytes"):
            continue
        assert getattr(defaults, name) != getattr(plain, name) or getattr(defaults, name) != getattr(gang, name), name


def test_every_field_survives_the_enqueue_signal() -> None:
    """The scheduler's converter (a plan per type, activities.contracts.dataclass_json) reads every field a
    sender writes."""
    sender, scheduler = DataConverter.default.payload_converter, data_converter(None).payload_converter
    for spec in (_spec(), _spec(**GANG)):
        payload = sender.to_payloads([Enqueue("job-1", spec, {0: 0, 1: 0}, 12.5)])[0]
        assert spec == scheduler.from_payloads([payload], [Enqueue])[0].spec


def test_every_field_survives_continue_as_new() -> None:
    """The scheduler's carry (its messages, by the one codec) hands every field of a queued job's spec to the
    next run."""
    for spec in (_spec(), _spec(**GANG)):
        state = SchedulerState()
        state.pending["j"] = PendingEntry("j", spec, {0: 0, 1: 0}, 5.0)
        assert spec == unpack(pack(state)).pending["j"].spec


def test_every_field_the_pass_reads_reaches_it() -> None:
    """The pass's snapshot carries every field of a spec the pure scheduler reads;
    a throttled job's placed tasks are counted in it."""
    state = SchedulerState()
    state.workers["w0"] = WorkerEntry("w0", "s", 8000, 16 << 30, 4, 8, {"zone": "z1"}, host="h")
    for job_id, spec in (("plain", _spec()), ("gang", _spec(**GANG))):
        state.pending[job_id] = PendingEntry(job_id, spec, {4: 0, 5: 0}, 5.0)
    for i in range(2):
        state.placements[task_workflow_id("plain", i)] = Placement("plain", i, 0, "w0", 1500, 3 << 30, 2, 4)
    data = compressed.decompress(encode_snapshot(state, now=10.0))
    jobs = {j.job_id: j for j in jobs_from_pb(pb.SchedulingSnapshot.FromString(data))}
    for job_id, spec in (("plain", _spec()), ("gang", _spec(**GANG))):
        job = jobs[job_id]
        assert (spec.cpu_millis, spec.memory_bytes, spec.gpus, spec.tpus) == (
            job.request.cpu_millis,
            job.request.memory_bytes,
            job.request.gpus,
            job.request.tpus,
        )
        assert [(c.key, str(c.op), c.value) for c in spec.constraints] == [
            (c.key, str(c.op), c.value) for c in job.constraints
        ]
        assert (spec.group_by or None, spec.priority, spec.scheduling_timeout_seconds) == (
            job.group_by,
            job.priority,
            job.scheduling_timeout_seconds,
        )
        assert (frozenset(spec.tolerations), spec.num_groups, spec.band, spec.user, spec.max_concurrent) == (
            job.tolerations,
            job.num_groups,
            str(job.band),
            job.user,
            job.max_concurrent,
        )
    assert 2 == jobs["plain"].placed
    read = {
        "cpu_millis",
        "memory_bytes",
        "gpus",
        "tpus",
        "constraints",
        "group_by",
        "priority",
        "scheduling_timeout_seconds",
        "tolerations",
        "num_groups",
        "band",
        "user",
        "max_concurrent",
    }
    assert {f.name for f in dataclasses.fields(SchedulingSpec)} == read | NOT_IN_SNAPSHOT
