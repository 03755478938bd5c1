"""Attribute semantics: how one constraint is evaluated on one worker's attributes.

This module is the single definition of what a constraint means. The index
(`scheduler.index`) answers the same question for many workers at once and is
property-tested against `evaluate` here, so any change of meaning starts here.

Typing rules (decided once, used everywhere):

- Values are `str`, numbers (`int` and `float`, compared numerically, so
  `1 == 1.0`) or `bool`. Python makes `bool` a subclass of `int`; we do not:
  booleans are their own type, so `True` never EQ `1` and `True` is never
  ordered against numbers. A boolean EQ only matches a boolean.
- EQ/NE compare values of the same kind; values of different kinds are never
  equal (so NE between kinds holds).
- GT/GE/LT/LE compare numbers only; a string or boolean attribute never
  satisfies an ordering constraint (a constraint with a non-numeric ordering
  value is rejected when the Constraint is built).
- A missing attribute fails every operator except NOT_EXISTS (NE included:
  "zone != a" does not select workers that have no zone at all).
- IN holds when the attribute EQ one of its values (the union of those EQ
  constraints); NOT_IN when the attribute is present and EQ none of them (the
  intersection of the NEs), so a missing attribute fails NOT_IN like NE.
- A soft constraint evaluates like a hard one; only the pass treats it as a
  preference (`PendingJob.preferences`).
- NaN equals nothing and orders against nothing (IEEE semantics).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, cast

from scheduler.types import (
    KIND_OF_TYPE,
    ORDERING_OPS,
    SET_OPS,
    TAINT_PREFIX,
    UNARY_OPS,
    AttrValue,
    Constraint,
    Op,
    value_kind,
)

# A hashable normalisation of a value that keeps booleans apart from numbers
# while letting 1 and 1.0 meet: ("b", True), ("n", 1), ("s", "x").
ValueKey = tuple[str, AttrValue]
_KIND_OF_TYPE = KIND_OF_TYPE.get


def value_key(value: AttrValue) -> ValueKey:
    """Return the normalised, hashable key under which `value` is indexed for equality."""
    return (_KIND_OF_TYPE(value.__class__) or value_kind(value), value)


def is_number(value: object) -> bool:
    """Tell whether a value takes part in ordering comparisons (int/float, not bool, not NaN)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def values_equal(a: AttrValue, b: AttrValue) -> bool:
    """Compare two attribute values with the kind rules above (bools only equal bools)."""
    return value_kind(a) == value_kind(b) and a == b


def evaluate(constraint: Constraint, attributes: Mapping[str, AttrValue]) -> bool:
    """Evaluate one constraint against one worker's attributes: the reference semantics."""
    key, op, want = constraint.key, constraint.op, constraint.value
    present = key in attributes
    match op:
        case Op.EXISTS:
            return present
        case Op.NOT_EXISTS:
            return not present
    if not present or want is None:
        return False
    have = attributes[key]
    if isinstance(want, (tuple, list)):  # IN / NOT_IN (Constraint keeps their values as a tuple, nothing else)
        found = any(values_equal(have, item) for item in want)
        return found if op == Op.IN else not found
    match op:
        case Op.EQ:
            return values_equal(have, want)
        case Op.NE:
            return not values_equal(have, want)
    if not (is_number(have) and is_number(want)):
        return False
    number, bound = cast(float, have), cast(float, want)  # exact int/float comparison, no conversion
    match op:
        case Op.GT:
            return number > bound
        case Op.GE:
            return number >= bound
        case Op.LT:
            return number < bound
        case Op.LE:
            return number <= bound
    raise AssertionError(f"unhandled operator {op}")  # pragma: no cover - Op is closed


def evaluate_all(constraints: Iterable[Constraint], attributes: Mapping[str, AttrValue]) -> bool:
    """Tell whether every constraint holds on the attributes (the brute-force matcher)."""
    return all(evaluate(c, attributes) for c in constraints)


def taint_constraints(
    constraints: Iterable[Constraint], tolerations: Iterable[str], taint_keys: Iterable[str]
) -> tuple[Constraint, ...]:
    """Return the implicit NOT_EXISTS constraints a job gets for the taints it does not tolerate.

    A taint `taint:<name>` repels a job unless `<name>` is in its tolerations or
    the job mentions the key `taint:<name>` in a constraint of its own (an
    explicit mention is a toleration: the job said what it wants of that key).
    """
    mentioned = {c.key for c in constraints}
    tolerated = set(tolerations)
    return tuple(
        Constraint.stored(key, Op.NOT_EXISTS)  # a worker's key: taken as the worker has it
        for key in sorted(taint_keys)
        if key not in mentioned and key[len(TAINT_PREFIX) :] not in tolerated
    )


_INT_TEXT = re.compile(r"^[+-]?\d+$")
_FLOAT_TEXT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


def value_from_text(text: str) -> AttrValue:
    """A typed value from `K=V` text (`--attribute`, `-c`): integers and floats become numbers, true/false
    booleans, a double-quoted JSON string (`"5"`, `"1.10"`) that string, the rest strings as they are."""
    if _INT_TEXT.match(text):
        return int(text)
    if _FLOAT_TEXT.match(text):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if len(text) >= 2 and text[0] == text[-1] == '"':
        with contextlib.suppress(ValueError):
            quoted = json.loads(text)
            if isinstance(quoted, str):
                return quoted
    return text


def value_text(value: AttrValue) -> str:
    """`value` as `K=V` text that `value_from_text` reads back as the same value and type: a string that
    would read as a number or a boolean (`"5"`, `"1.10"`, `"true"`) is double-quoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        read = value_from_text(value)
        return value if isinstance(read, str) and read == value else json.dumps(value)
    return str(value)


def _shown(value: AttrValue) -> str:
    return value_text(value)


def describe(constraint: Constraint) -> str:
    """Render a constraint the way users write it: "zone=a", "cores>=8", "gpu", "!taint:x", "zone in a,b"."""
    symbol = {Op.EQ: "=", Op.NE: "!=", Op.GT: ">", Op.GE: ">=", Op.LT: "<", Op.LE: "<="}
    if constraint.op == Op.EXISTS:
        return constraint.key
    if constraint.op == Op.NOT_EXISTS:
        return f"!{constraint.key}"
    value = constraint.value
    if isinstance(value, (tuple, list)):
        word = "in" if constraint.op == Op.IN else "notin"
        return f"{constraint.key} {word} {','.join(_shown(item) for item in value)}"
    return f"{constraint.key}{symbol[Op(constraint.op)]}{_shown(value)}"  # type: ignore[arg-type]


def split_soft(constraints: Iterable[Constraint]) -> tuple[tuple[Constraint, ...], tuple[Constraint, ...]]:
    """Split a job's constraints into (hard, soft), each in the order given: `PendingJob.constraints`
    and `PendingJob.preferences`."""
    hard: list[Constraint] = []
    soft: list[Constraint] = []
    for constraint in constraints:
        (soft if constraint.soft else hard).append(constraint)
    return tuple(hard), tuple(soft)


def _coerce(item: Any) -> Constraint:
    """Build a Constraint from a Constraint, a mapping {key, op, value} or a (key, op[, value]) tuple."""
    if isinstance(item, Constraint):
        return Constraint(item.key, item.op, item.value, item.soft)  # re-run validation
    if isinstance(item, Mapping):
        return Constraint(item.get("key"), item.get("op"), item.get("value"), item.get("soft", False))  # type: ignore[arg-type]
    if isinstance(item, tuple) and len(item) in (2, 3, 4):
        return Constraint(*item)
    raise ValueError(f"constraint must be a Constraint, mapping or (key, op, value) tuple, got {item!r}")


def validate_constraints(constraints: Iterable[Any]) -> None:
    """Raise ValueError, naming the field, for any constraint the scheduler could never honour.

    This is the submission-time check: a bad request fails at submit instead of
    pending forever. Beyond what Constraint validates on construction (operator
    arity, ordering on numbers only, IN / NOT_IN lists of one type), it rejects NaN
    values and hard constraint sets that contradict themselves on one key (EXISTS
    and NOT_EXISTS, two different EQ values, NOT_EXISTS next to a value operator).
    Soft constraints are preferences: one that no worker could meet is not an error.
    """
    by_key: dict[str, list[Constraint]] = {}
    for index, item in enumerate(constraints):
        try:
            constraint = _coerce(item)
        except ValueError as error:
            raise ValueError(f"constraints[{index}]: {error}") from None
        values = constraint.value if isinstance(constraint.value, (tuple, list)) else (constraint.value,)
        if any(isinstance(value, float) and math.isnan(value) for value in values):
            raise ValueError(f"constraints[{index}]: value for {constraint.key!r} must not be NaN")
        if not constraint.soft:
            by_key.setdefault(constraint.key, []).append(constraint)
    for key, group in by_key.items():
        ops = {c.op for c in group}
        if Op.NOT_EXISTS in ops and len(ops) > 1:
            raise ValueError(
                f"constraints on {key!r} contradict: NOT_EXISTS with {sorted(ops - {Op.NOT_EXISTS})}"
            )
        equals = {value_key(c.value) for c in group if c.op == Op.EQ and isinstance(c.value, (str, int, float))}
        if len(equals) > 1:
            raise ValueError(f"constraints on {key!r} contradict: EQ to {len(equals)} different values")
        allowed: set[ValueKey] | None = None
        for c in group:
            if c.op == Op.IN and isinstance(c.value, (tuple, list)):
                listed = {value_key(v) for v in c.value}
                allowed = listed if allowed is None else allowed & listed
        if allowed is not None and not (allowed & equals if equals else allowed):
            raise ValueError(f"constraints on {key!r} contradict: no value is allowed by all its EQ and IN")


__all__ = [
    "ORDERING_OPS",
    "SET_OPS",
    "UNARY_OPS",
    "ValueKey",
    "describe",
    "evaluate",
    "evaluate_all",
    "is_number",
    "split_soft",
    "taint_constraints",
    "validate_constraints",
    "value_key",
    "value_kind",
    "values_equal",
]
