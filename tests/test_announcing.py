"""An announcement's deliveries as columns (activities/contracts/announcing.py): the activity gets back the
deliveries the scheduler gave, in their order, each task's signal argument as the JSON of its `Assigned`."""

from __future__ import annotations

import pytest

from activities.contracts import ASSIGNED, UNSCHEDULABLE, Delivery, TaskNetwork
from activities.contracts.announcing import AssignmentBatch
from activities.contracts.dataclass_json import to_plain
from iris.security.codec import data_converter
from workflows.messages import Assigned


def _wire(batch: AssignmentBatch) -> AssignmentBatch:
    converter = data_converter(None).payload_converter
    return converter.from_payloads(converter.to_payloads([batch]), [AssignmentBatch])[0]


def test_the_activity_gets_the_deliveries_in_their_order_as_the_list_gave_them() -> None:
    network = TaskNetwork(ports={"http": 8080}, coordinator="h0:1234", slice_hosts=["h0", "h1"])
    deliveries = [
        Delivery("iris-task-j-0", UNSCHEDULABLE, {"reason": "timed out"}),
        Delivery("iris-task-j-1", ASSIGNED, Assigned(2, "w1", "s1", network, "r1", 6.0)),
        Delivery("iris-task-j-2", ASSIGNED, Assigned(0, "w2")),
        Delivery("iris-task-k-0", UNSCHEDULABLE, {"reason": "timed out"}),
        Delivery("iris-task-k-1", ASSIGNED, Assigned(1, "w3", "s3")),
    ]
    back = _wire(AssignmentBatch.of(deliveries)).deliveries()
    assert [(d.workflow_id, d.signal, to_plain(d.arg)) for d in deliveries] == [
        (d.workflow_id, d.signal, d.arg) for d in back
    ]
    assert 5 == len(AssignmentBatch.of(deliveries))


def test_no_assignment_and_no_delivery_at_all() -> None:
    only = [Delivery("iris-task-j-0", UNSCHEDULABLE, {"reason": "timed out"})]
    assert [("iris-task-j-0", UNSCHEDULABLE)] == [
        (d.workflow_id, d.signal) for d in _wire(AssignmentBatch.of(only)).deliveries()
    ]
    assert [] == _wire(AssignmentBatch.of([])).deliveries()


def test_assignments_of_two_types_are_refused() -> None:
    mixed = [Delivery("a", ASSIGNED, Assigned(0, "w")), Delivery("b", ASSIGNED, {"attempt": 0})]
    with pytest.raises(ValueError, match="one dataclass"):
        AssignmentBatch.of(mixed)


@pytest.mark.parametrize(
    ("batch", "names"),
    [
        (AssignmentBatch(["a", "b"], ["attempt"], [[0]]), "one value per workflow id"),
        (AssignmentBatch(["a"], ["attempt", "worker_id"], [[0]]), "one column per field"),
        (AssignmentBatch(["a"], ["attempt"], [[0]], [Delivery("b", UNSCHEDULABLE, {})], [5]), "other_at"),
        (AssignmentBatch(["a"], ["attempt"], [[0]], [Delivery("b", UNSCHEDULABLE, {})], []), "others"),
    ],
)
def test_columns_that_do_not_agree_are_refused_naming_them(batch: AssignmentBatch, names: str) -> None:
    with pytest.raises(ValueError, match=names):
        batch.deliveries()
