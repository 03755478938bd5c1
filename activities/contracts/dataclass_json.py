"""Iris's message dataclasses to and from JSON payloads: a plan compiled once per type, no per-value hints.

The SDK's JSON converter resolves a dataclass's type hints for every value it decodes (~0.2-0.8 ms
a message in the workflow sandbox): thousands of enqueues or ended tasks in one workflow task then
passed the 2 s deadlock detector, and three messages had grown hand-written decoders to get around
it. This is the one decoder for all of them: the payload converter (iris/security/codec.py) asks `plan_for`
once per type hint and then applies the plan, so a new field of a message is decoded the moment it
is declared. Its rules are the SDK's (missing fields default, unknown ones are ignored, a value of
the wrong type is a TypeError); a type it does not know (datetimes, unions other than `X | None`,
tuples of any length) leaves the whole type to the SDK's converter. The scheduler's continue-as-new carry
(workflows/scheduler/scheduler_carry.py) is written and read by the same plans.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable
from typing import Any

__all__ = ["Plan", "UnplainError", "plan_for", "to_plain"]

Plan = Callable[[Any], Any]


class _UnsupportedTypeError(Exception):
    """A type this module leaves to the SDK."""


@functools.cache
def plan_for(hint: Any) -> Plan | None:
    """How to turn decoded JSON into `hint` (a dataclass, or a list or dict of them); None: the SDK's job."""
    try:
        return _plan(hint)
    except _UnsupportedTypeError:
        return None


def _plan(hint: Any) -> Plan:
    if hint is Any or hint is object:
        return _same
    if hint is bool:
        return _exact(bool)
    if hint is str:
        return _exact(str)
    if hint is int:
        return _integer
    if hint is float:
        return _number
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_plan(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (list, typing.List) and len(args) == 1:  # noqa: UP006 - the alias as written in hints
        item = _plan(args[0])
        if args[0] in _COLUMNS:  # a column of numbers or strings: checked by type sets, in C
            return _column(item, *_COLUMNS[args[0]])
        return lambda value: [item(v) for v in _checked(value, list)]
    if origin in (dict, typing.Dict) and len(args) == 2:  # noqa: UP006
        key, val = _key_plan(args[0]), _plan(args[1])
        if args[1] in _COLUMNS:  # scalar values: checked at once, as a list's
            return _scalar_dict(key, val, _COLUMNS[args[1]][0])
        return lambda value: {key(k): val(v) for k, v in _checked(value, dict).items()}
    if origin in (tuple, typing.Tuple) and args and Ellipsis not in args:  # noqa: UP006 - a fixed-length tuple
        items = [_plan(a) for a in args]

        def fixed(value: Any) -> tuple[Any, ...]:
            if len(_checked(value, list)) != len(items):
                raise TypeError(f"expected {len(items)} items, got {len(value)}")
            return tuple(plan(v) for plan, v in zip(items, value, strict=True))

        return fixed
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        inner = _plan(next(a for a in args if a is not type(None)))
        return lambda value: None if value is None else inner(value)
    raise _UnsupportedTypeError(hint)


# A list of these is checked at once: the types its items may have as they are, and those to convert.
_COLUMNS: dict[Any, tuple[frozenset[type], Callable[[Any], Any] | None]] = {
    int: (frozenset({int}), None),
    float: (frozenset({float}), float),
    str: (frozenset({str}), None),
    bool: (frozenset({bool}), None),
}


def _column(item: Plan, exact: frozenset[type], convert: Callable[[Any], Any] | None) -> Plan:
    """A list of scalars: kept (a copy) when every item has the type already, else converted or refused
    item by item as `item` does; the same values either way, at C speed for the common case."""

    def plan(value: Any) -> list[Any]:
        kinds = set(map(type, _checked(value, list)))
        if kinds <= exact:
            return list(value)
        if convert is not None and kinds <= {int, float}:
            return list(map(convert, value))
        return [item(v) for v in value]

    return plan


def _scalar_dict(key: Plan, val: Plan, exact: frozenset[type]) -> Plan:
    def plan(value: Any) -> dict[Any, Any]:
        if set(map(type, _checked(value, dict).values())) <= exact:
            return dict(zip(map(key, value), value.values(), strict=True))
        return {key(k): val(v) for k, v in value.items()}

    return plan


def _dataclass_plan(cls: type) -> Plan:
    """The fields' plans; the scalar fields (str, int, float, bool) read at once when each value has its
    field's exact type, as in nearly every message, by comparing their types in C: no call per field,
    and no `isinstance`, which the workflow sandbox wraps for the whole process. Otherwise field by field."""
    hints = typing.get_type_hints(cls)
    fields = [(f.name, _plan(hints[f.name])) for f in dataclasses.fields(cls) if f.init]
    scalars = [(name, plan) for name, plan in fields if hints[name] in _SCALAR_HINTS]
    others = [(name, plan) for name, plan in fields if hints[name] not in _SCALAR_HINTS]
    names = [name for name, _ in scalars]
    kinds = tuple(hints[name] for name in names)

    def build(value: Any) -> Any:
        obj = _checked(value, dict)
        if tuple(map(type, map(obj.get, names))) == kinds:  # all there, each of its exact type
            kwargs = dict(zip(names, map(obj.__getitem__, names), strict=True))
        else:
            kwargs = {name: plan(obj[name]) for name, plan in scalars if name in obj}
        for name, plan in others:
            if name in obj:
                kwargs[name] = plan(obj[name])
        return cls(**kwargs)

    return build


def _key_plan(hint: Any) -> Plan:
    """JSON object keys are strings: an int key comes back from its digits, as the SDK's converter does."""
    if hint is int:
        return int
    if hint is str or hint is Any:
        return _same
    raise _UnsupportedTypeError(hint)


def _same(value: Any) -> Any:
    return value


def _checked(value: Any, kind: type) -> Any:
    # The exact type first: `isinstance` in a workflow task is the sandbox's wrapper (~1 us a call).
    if type(value) is not kind and not isinstance(value, kind):
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _exact(kind: type) -> Plan:
    def check(value: Any) -> Any:
        if type(value) is not kind and not isinstance(value, kind):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    return check


_NUMBERS = (int, float)


def _integer(value: Any) -> int:
    # As the SDK's converter: a float stands for its integer part.
    if type(value) not in _NUMBERS and not isinstance(value, int | float):
        raise TypeError(f"expected int, got {type(value).__name__}")
    return int(value)


def _number(value: Any) -> float:
    if type(value) not in _NUMBERS and not isinstance(value, int | float):
        raise TypeError(f"expected float, got {type(value).__name__}")
    return float(value)


_SCALARS = (str, int, float, bool, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)
_SCALAR_HINTS = frozenset({str, int, float, bool})  # fields whose JSON value is already the value
_FIELDS: dict[type, tuple[str, ...] | None] = {}  # a dataclass's fields; None for an enum


class UnplainError(Exception):
    """A value `to_plain` leaves to the SDK's encoder (a protobuf message, a set, a datetime, ...)."""


def to_plain_column(values: list[Any]) -> list[Any]:
    """`values` as `to_plain` gives each of them: the list itself when every one is a scalar already (the
    common case, checked without a call per value)."""
    if {type(v) for v in values} <= _SCALAR_TYPES:
        return values
    return [to_plain(v) for v in values]


def to_plain(value: Any) -> Any:
    """`value` as the JSON-ready dicts and lists `dataclasses.asdict` gives, without its deep copy and
    without `isinstance` (which the workflow sandbox wraps for the whole process): encoding 2,000
    assignments through the SDK's encoder took ~0.1 s of a workflow task. UnplainError for anything else."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list or kind is tuple:
        return [to_plain(v) for v in value]
    if kind is dict:
        return {k: to_plain(v) for k, v in value.items()}
    if kind not in _FIELDS:
        if issubclass(kind, enum.Enum):
            _FIELDS[kind] = None
        elif dataclasses.is_dataclass(value):
            _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(value))
        else:
            raise UnplainError(kind.__name__)
    names = _FIELDS[kind]
    if names is None:  # an enum, by its value (as the SDK's encoder writes it)
        return to_plain(value.value)
    return {name: to_plain(getattr(value, name)) for name in names}
