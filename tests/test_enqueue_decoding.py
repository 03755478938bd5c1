"""The scheduler decodes `enqueue` signals by hand; it must read what Temporal's converter reads."""

from __future__ import annotations

import json

import pytest
from temporalio.converter import DataConverter

from workflows.messages import ConstraintSpec, Enqueue, SchedulingSpec, enqueue_from_json

SPECS = [
    SchedulingSpec(cpu_millis=100, memory_bytes=1 << 30),
    SchedulingSpec(1, 2, 3, 4, [ConstraintSpec("zone", "eq", True), ConstraintSpec("k", "in", [1, "x"])]),
    SchedulingSpec(1, 2, group_by="g", priority=5, scheduling_timeout_seconds=2.5, tolerations=["t"]),
]


@pytest.mark.parametrize("spec", SPECS)
def test_hand_decoding_matches_the_converter(spec: SchedulingSpec) -> None:
    """An enqueue sent by any client decodes to the same request either way."""
    converter = DataConverter.default.payload_converter
    payload = converter.to_payloads([Enqueue("job-1", spec, {0: 1, 7: 2}, 12.5)])[0]
    assert enqueue_from_json(json.loads(payload.data)) == converter.from_payloads([payload], [Enqueue])[0]


def test_older_senders_without_defaults_still_decode() -> None:
    """Fields a sender left out take their defaults, unknown ones are ignored (as the converter does)."""
    raw = {"job_id": "j", "spec": {"cpu_millis": 5, "memory_bytes": 6, "future": 1}, "attempts": {"3": 0}}
    assert enqueue_from_json(raw) == Enqueue("j", SchedulingSpec(5, 6), {3: 0}, 0.0)
