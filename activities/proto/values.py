"""Typed attribute values <-> AttributeValue messages (the one place that knows the oneof)."""

from __future__ import annotations

from typing import Any

from activities.proto import cluster_pb2 as pb


def set_attr(out: pb.AttributeValue, value: Any) -> None:
    """Store a str/int/float/bool; bool is checked first because it is a subclass of int."""
    if isinstance(value, bool):
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
