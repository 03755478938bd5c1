"""Typed attribute values <-> AttributeValue messages (the one place that knows the oneof)."""

from __future__ import annotations

from typing import Any

from activities.proto import cluster_pb2 as pb

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
