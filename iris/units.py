"""Parsing of user-facing resource quantities ("1.5Gi", "512m", 0.5 cores).

Parsed once at the edge (ResourceSpec, CLI flags, config files) into the exact
integers the scheduler works in: millicores and bytes.
"""

from __future__ import annotations

import re

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
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_memory(value: str | int | float, field: str = "memory") -> int:
    """Bytes from "512m", "2g", "1.5Gi", "100MB" or a number of bytes; ValueError names `field`."""
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected a size like '2g' or a number of bytes, got {value!r}")
    if isinstance(value, (int, float)):
        if not 0 <= value < float("inf"):  # negative, NaN or infinite
            raise ValueError(f"{field}: must be a non-negative size, got {value!r}")
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected a size like '2g', got {type(value).__name__}")
    match = _MEMORY_RE.match(value)
    if not match or match.group(2).lower() not in _MEMORY_UNITS:
        raise ValueError(f"{field}: cannot parse {value!r}; use a size like '512m', '2g', '1.5Gi' or bytes")
    return int(float(match.group(1)) * _MEMORY_UNITS[match.group(2).lower()])


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
    elif isinstance(value, (int, float)):
        millis = float(value) * 1000
    else:
        raise ValueError(f"{field}: expected a number of cores, got {type(value).__name__}")
    if millis != millis or millis < 0 or millis == float("inf"):
        raise ValueError(f"{field}: must be a non-negative number of cores, got {value!r}")
    return round(millis)


def format_memory(num_bytes: int) -> str:
    """Human-readable bytes, e.g. 1.5Gi."""
    size = float(num_bytes)
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if size < 1024 or unit == "Ti":
            return f"{size:.0f}{unit}" if size == int(size) else f"{size:.1f}{unit}"
        size /= 1024
    return f"{num_bytes}"
