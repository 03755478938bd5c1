"""Parsing of CLI expressions: constraints (`zone=us`, `tpu-worker-id>=2`, `!taint:x`) and `K=V` pairs."""

from __future__ import annotations

import re

from iris.types import Constraint
from scheduler.types import AttrValue, Op

_OPS = (("!=", Op.NE), (">=", Op.GE), ("<=", Op.LE), ("=", Op.EQ), (">", Op.GT), ("<", Op.LT))
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


def parse_value(text: str) -> AttrValue:
    """Typed value from text: integers and floats become numbers, true/false booleans, the rest strings."""
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def parse_constraint(expr: str) -> Constraint:
    """`k=v` `k!=v` `k>v` `k>=v` `k<v` `k<=v`, `k` (exists), `!k` (not exists)."""
    text = expr.strip()
    if not text:
        raise ValueError("--constraint: empty expression")
    for token, op in _OPS:
        key, sep, value = text.partition(token)
        if sep:
            if not key.strip() or not value.strip():
                raise ValueError(f"--constraint {expr!r}: expected KEY{token}VALUE")
            return Constraint(key.strip(), op, parse_value(value.strip()))
    if text.startswith("!"):
        return Constraint(text[1:].strip(), Op.NOT_EXISTS)
    return Constraint(text, Op.EXISTS)


def parse_pair(expr: str, flag: str) -> tuple[str, str]:
    key, sep, value = expr.partition("=")
    if not sep or not key:
        raise ValueError(f"{flag} {expr!r}: expected KEY=VALUE")
    return key, value
