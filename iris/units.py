"""Parsing of user-facing quantities: sizes ("1.5Gi", "512m"), cores (0.5) and durations ("30s", "10m").

Parsed once at the edge (ResourceSpec, CLI flags, config files) into what the scheduler
works in: millicores, bytes and seconds.

Why not pydantic's own types: `ByteSize` reads "1g" and "512m" as decimal (10**9, 512 * 10**6)
and refuses "1.5Gi", while Iris's sizes are binary ("1g" is 2**30, as in the public API's
`ResourceSpec(memory="1g")` and every config file); `timedelta` takes ISO 8601 ("PT30S") and
"HH:MM:SS" but not "30s", "10m" or "1h30m". Using them would change what every existing
request and config means, so the parsers here stay, each one small and tested.
"""

from __future__ import annotations

import math
import re

from scheduler.types import INT64_MAX

_MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "ki": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mi": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gi": 1024**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "ti": 1024**4,
    "tib": 1024**4,
}
MIN_MEMORY = 2**20
"""The least memory a task may ask for (0 asks for no limit), and a local worker may have: with less, no
process starts (its first page faults pass the limit), and the task failed with "cannot start task"."""
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_DURATION_PART_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
# The largest float of millicores that rounds into an int64 (2**63 itself is a float, and too big).
_MAX_MILLIS = 2**63 - 1024
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_memory(value: str | int | float, field: str = "memory") -> int:
    """Bytes from "512m", "2g", "1.5Gi", "100MB" or a number of bytes; ValueError names `field`.

    At most 8 EiB less a byte: memory travels as an int64 of bytes.
    """
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected a size like '2g' or a number of bytes, got {value!r}")
    if isinstance(value, (int, float)):
        if not 0 <= value < float("inf"):  # negative, NaN or infinite
            raise ValueError(f"{field}: must be a non-negative size, got {value!r}")
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"{field}: a number of bytes must be whole, got {value!r}; use a size like '1.5g'")
        return _bytes_in_range(int(value), value, field)
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected a size like '2g', got {type(value).__name__}")
    match = _MEMORY_RE.match(value)
    if not match or match.group(2).lower() not in _MEMORY_UNITS:
        raise ValueError(f"{field}: cannot parse {value!r}; use a size like '512m', '2g', '1.5Gi' or bytes")
    number, unit = match.group(1), _MEMORY_UNITS[match.group(2).lower()]
    if unit == 1 and not number.isdigit():  # "1.5" or "1.5b": a fraction of a byte
        raise ValueError(f"{field}: a number of bytes must be whole, got {value!r}; use a size like '1.5g'")
    exact = int(number) * unit if number.isdigit() else int(float(number) * unit)  # no float rounding of big ints
    return _bytes_in_range(exact, value, field)


def _bytes_in_range(num_bytes: int, value: object, field: str) -> int:
    if num_bytes > INT64_MAX:
        raise ValueError(f"{field}: must be at most {INT64_MAX} bytes, got {short(value)}")
    return num_bytes


def parse_cpu(value: str | int | float, field: str = "cpu") -> int:
    """Millicores from cores (0.5 = half a core, granularity 1/1000) or "500m"; ValueError names `field`."""
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected a number of cores, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        try:
            millis = float(text[:-1]) if text.endswith("m") else float(text) * 1000
        except ValueError:
            raise ValueError(f"{field}: cannot parse {value!r}; use cores like 2 or 0.5, or '500m'") from None
    elif isinstance(value, int):
        millis = value * 1000  # exact: a float would round a big count of cores
    elif isinstance(value, float):
        millis = value * 1000
    else:
        raise ValueError(f"{field}: expected a number of cores, got {type(value).__name__}")
    if millis != millis or millis < 0 or millis == float("inf"):
        raise ValueError(f"{field}: must be a non-negative number of cores, got {value!r}")
    if 0 < millis < 1:  # it would round to no cpu at all, which is not what was asked for
        raise ValueError(f"{field}: must be 0 or at least 0.001 cores (granularity 1/1000), got {short(value)}")
    if millis > _MAX_MILLIS:  # cpu travels as an int64 of millicores
        raise ValueError(f"{field}: must be at most {_MAX_MILLIS // 1000} cores, got {short(value)}")
    return round(millis)


def kind(value: object) -> str:
    """A YAML-ish name for a value's type, for error messages."""
    if value is None:
        return "nothing"
    names = {"dict": "a mapping", "list": "a list", "str": "a string", "tuple": "a list"}
    return names.get(type(value).__name__, type(value).__name__)


def short(value: object) -> str:
    """`value`'s repr, cut short for a one-line error message."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}… ({len(text)} characters)"


def parse_duration(value: object, field_name: str) -> float:
    """Seconds from "0s", "30s", "5m", "1h", "1m30s", "500ms" or a plain number of seconds."""
    prefix = f"{field_name}: " if field_name else ""
    if isinstance(value, bool):
        raise ValueError(f"{prefix}expected a duration like '30s' or '5m', got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        parts = _DURATION_PART_RE.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            try:
                seconds = float(text)
            except ValueError:
                raise ValueError(
                    f"{prefix}cannot parse {short(value)}; use a duration like '0s', '30s', '5m', '1h'"
                ) from None
        else:
            seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    else:
        raise ValueError(f"{prefix}expected a duration like '30s' or '5m', got {kind(value)}")
    if not 0 <= seconds < math.inf:
        raise ValueError(f"{prefix}must be a non-negative duration, got {value!r}")
    return seconds


def format_memory(num_bytes: int) -> str:
    """Human-readable bytes, e.g. 1.5Gi."""
    size = float(num_bytes)
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if size < 1024 or unit == "Ti":
            return f"{size:.0f}{unit}" if size == int(size) else f"{size:.1f}{unit}"
        size /= 1024
    return f"{num_bytes}"
