"""Typed attribute values <-> AttributeValue messages (the one place that knows the oneof)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from activities.proto import cluster_pb2 as pb

if TYPE_CHECKING:  # the Temporal SDK only where a payload is made: the CLI parses attributes without it
    from temporalio.common import RawValue

_FIELDS = {bool: "bool_value", int: "int_value", float: "float_value", str: "string_value"}


def set_attr(out: pb.AttributeValue, value: Any) -> None:
    """Store a str/int/float/bool; bool is checked first because it is a subclass of int.

    The exact type picks the field first: a workflow snapshot sets tens of thousands of attributes,
    and inside the workflow sandbox every `isinstance` goes through a slower wrapper.
    """
    field = _FIELDS.get(type(value))
    if field is not None:
        setattr(out, field, value)
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.float_value = value
    else:
        out.string_value = str(value)


def get_attr(value: pb.AttributeValue) -> Any:
    """The Python value, or None when unset."""
    kind = value.WhichOneof("kind")
    return getattr(value, kind) if kind else None


def set_constraint(out: pb.Constraint, key: str, op: str, value: Any = None, soft: bool = False) -> None:
    """Fill a Constraint message: the one encoder of a constraint (scalar `value`, or IN / NOT_IN's list).

    Every hop a constraint takes (the client's request, the scheduler's snapshot, its reservations)
    writes it here and reads it back with `constraint_fields`, so a new field is added in one place.
    """
    out.key, out.op = key, str(op)
    if isinstance(value, (list, tuple)):
        for item in value:
            set_attr(out.values.add(), item)
    elif value is not None:
        set_attr(out.value, value)
    if soft:
        out.soft = True


def constraint_fields(c: pb.Constraint) -> tuple[str, str, Any, bool]:
    """(key, op, value, soft) of a Constraint message; IN / NOT_IN's values come back as a list."""
    if c.values:
        return c.key, c.op, [get_attr(v) for v in c.values], c.soft
    return c.key, c.op, get_attr(c.value) if c.HasField("value") else None, c.soft


def binary_payload(message: Message) -> RawValue:
    """`message` as a binary/protobuf payload, whatever its size (Iris's converter writes a message under 8 KiB
    as JSON, iris/security/codec.py; an agent's batch of hosts is about that size).

    The receiving handler, typed with the message class, reads either; the binary one is parsed in C,
    the JSON one field by field in Python (6,900 hosts' registrations took ~0.3 s of a scheduler task).
    """
    from temporalio.api.common.v1 import Payload
    from temporalio.common import RawValue

    metadata = {"encoding": b"binary/protobuf", "messageType": message.DESCRIPTOR.full_name.encode()}
    return RawValue(Payload(metadata=metadata, data=message.SerializeToString()))
