"""Deliveries as the JSON payload Temporal's converter would write, built by hand: ~10x cheaper in a workflow.

The converter turns a dataclass into JSON through `dataclasses.asdict` (a deep copy) and checks types with
`isinstance`, which the workflow sandbox replaces for the whole process with a slower wrapper: encoding a
batch of 2,000 assignments took ~0.1 s of a workflow task. The activity decodes the payload as usual
(`list[Delivery]`), so the wire format is the converter's own: an object per dataclass, field by field.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

from activities.contracts import Delivery

_FIELDS: dict[type, tuple[str, ...]] = {}
_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    """`value` as JSON-ready dicts and lists, as `dataclasses.asdict` would give (no isinstance)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list or kind is tuple:
        return [_plain(v) for v in value]
    if kind is dict:
        return {k: _plain(v) for k, v in value.items()}
    names = _FIELDS.get(kind)
    if names is None:
        if not dataclasses.is_dataclass(value):
            raise _UnplainError(kind.__name__)
        names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(value))
    return {name: _plain(getattr(value, name)) for name in names}


class _UnplainError(Exception):
    """A value of a type this encoder leaves to the converter (an enum, a protobuf message, ...)."""


def deliveries_payload(deliveries: list[Delivery]) -> RawValue | list[Delivery]:
    """The `list[Delivery]` argument of a delivery activity, as a ready json/plain payload; the list
    itself (for the converter) if an argument is of a type this encoder does not write."""
    try:
        rows = [{"workflow_id": d.workflow_id, "signal": d.signal, "arg": _plain(d.arg)} for d in deliveries]
    except _UnplainError:
        return deliveries
    data = json.dumps(rows, separators=(",", ":")).encode()
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=data))
