"""Deliveries encoded by hand are what Temporal's converter writes, and read back as the same deliveries."""

from __future__ import annotations

import json

from temporalio.converter import DataConverter

from activities.contracts import ASSIGNED, REGISTERED, UNSCHEDULABLE, Delivery, TaskNetwork
from workflows.delivery_wire import deliveries_payload
from workflows.messages import Assigned, ConstraintSpec, Enqueue, RegistrationReply, SchedulingSpec, Unschedulable
from workflows.worker_lifecycle import WorkerState

CONVERTER = DataConverter.default.payload_converter


def test_hand_encoded_deliveries_are_the_converters_json() -> None:
    network = TaskNetwork("h0", {"http": 20001}, "h0:20002", ["h0", "h1"], 0)
    spec = SchedulingSpec(100, 2**20, constraints=[ConstraintSpec("zone", "EQ", "a")])
    deliveries = [
        Delivery("j/task-0", ASSIGNED, Assigned(0, "w0", "s")),
        Delivery("j/task-1", ASSIGNED, Assigned(2, "w1", "s", network, "rsv-j")),
        Delivery("j/task-2", UNSCHEDULABLE, Unschedulable(1, "no worker has a GPU")),
        Delivery("agent", REGISTERED, RegistrationReply({"w9": "refused"})),
        Delivery("j", "pending_reason", "waiting"),
        Delivery("iris-autoscaler", "wake", 3),
        Delivery("iris-scheduler", "enqueue", Enqueue("j", spec, {0: 0, 3: 1}, 5.5)),
    ]
    raw = deliveries_payload(deliveries)
    assert not isinstance(raw, list)
    assert json.loads(CONVERTER.to_payloads([deliveries])[0].data) == json.loads(raw.payload.data)
    assert CONVERTER.from_payloads([CONVERTER.to_payloads([deliveries])[0]], [list[Delivery]]) == (
        CONVERTER.from_payloads([raw.payload], [list[Delivery]])
    )


def test_a_value_it_does_not_write_is_left_to_the_converter() -> None:
    deliveries = [Delivery("w", "state", WorkerState.LOST)]
    assert deliveries == deliveries_payload(deliveries)
