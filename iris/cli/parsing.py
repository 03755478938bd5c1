"""Parsing of CLI expressions: constraints (`zone=us`, `cores>=2`, `!taint:x`, `zone in a,b`) and `K=V` pairs."""

from __future__ import annotations

import re
import time

from iris.types import Constraint
from scheduler.attributes import value_from_text
from scheduler.types import AttrValue, Op

_OPS = (("!=", Op.NE), (">=", Op.GE), ("<=", Op.LE), ("=", Op.EQ), (">", Op.GT), ("<", Op.LT))
# `zone in a,b` / `zone notin a,b`: a key without operator characters, the word, a comma-separated list.
# The list may be missing (`-c "zone in $UNSET"`): that is refused here, not read as a key named "zone in".
_SET = re.compile(r"^([^\s=!<>]+)\s+(in|notin)(?:\s+(.*))?$", re.IGNORECASE)


def parse_constraint(expr: str, flag: str = "--constraint", *, soft: bool = False) -> Constraint:
    """`k=v` `k!=v` `k>v` `k>=v` `k<v` `k<=v`, `k` (exists), `!k` (not exists), `k in a,b`, `k notin a,b`.

    `soft` makes it a preference (`--prefer`, same syntax); errors name `flag`.
    """
    text = expr.strip()
    if not text:
        raise ValueError(f"{flag}: empty expression")
    listed = _SET.match(text)
    if listed:
        key, word, rest = listed.groups()
        if not rest:
            raise ValueError(f"{flag} {expr!r}: expected KEY {word.lower()} VALUE,VALUE,... (no value given)")
        items = [item.strip() for item in rest.split(",")]
        if not all(items):
            raise ValueError(f"{flag} {expr!r}: expected KEY {word.lower()} VALUE,VALUE,... (no empty value)")
        op = Op.IN if word.lower() == "in" else Op.NOT_IN
        return _built(flag, expr, key, op, [value_from_text(item) for item in items], soft)
    for token, op in _OPS:
        key, sep, value = text.partition(token)
        if sep:
            if not key.strip() or not value.strip():
                raise ValueError(f"{flag} {expr!r}: expected KEY{token}VALUE")
            return _built(flag, expr, key.strip(), op, value_from_text(value.strip()), soft)
    if text.startswith("!"):
        return _built(flag, expr, text[1:].strip(), Op.NOT_EXISTS, None, soft)
    return _built(flag, expr, text, Op.EXISTS, None, soft)


def _built(flag: str, expr: str, key: str, op: Op, value: AttrValue | list[AttrValue] | None, soft: bool) -> Constraint:
    """The Constraint, or a ValueError that names the flag and the expression."""
    try:
        return Constraint(key, op, value, soft=soft)
    except ValueError as err:
        raise ValueError(f"{flag} {expr!r}: {err}") from None


def parse_pair(expr: str, flag: str) -> tuple[str, str]:
    key, sep, value = expr.partition("=")
    if not sep or not key:
        raise ValueError(f"{flag} {expr!r}: expected KEY=VALUE")
    return key, value


_CLOCK = re.compile(r"^\d{1,2}:\d{2}(:\d{2})?$")


def parse_since(text: str, flag: str = "--since", *, now: float | None = None) -> float:
    """Unix time from a DURATION back from now ("30s", "10m", "1h", "1h30m") or a TIME.

    A TIME is ISO 8601 ("2026-11-26T10:42:00Z"; without a zone, local time) or a clock time
    today ("10:42", "10:42:30", local time).
    """
    from datetime import datetime

    from iris.config.fields import parse_duration

    current = time.time() if now is None else now
    value = text.strip()
    try:
        if _CLOCK.match(value):
            today = datetime.fromtimestamp(current).date().isoformat()
            return datetime.fromisoformat(f"{today}T{value.zfill(5) if len(value) < 5 else value}").timestamp()
        if any(c in value for c in "-:T"):
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        return current - parse_duration(value, "")
    except ValueError:
        raise ValueError(
            f"{flag}: expected a duration (30s, 10m, 1h) or a time (10:42, 2026-11-26T10:42:00Z), got {text!r}"
        ) from None
