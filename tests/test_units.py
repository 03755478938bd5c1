"""Sizes and durations as users write them: binary sizes ("1g" is 2**30) and "30s"-style durations.

Why a test: pydantic's `ByteSize` would read "1g" as 10**9 and its `timedelta` refuses "30s"
(see iris.units); these pin the meanings the public API and config files promise.
"""

from __future__ import annotations

import pytest

from iris.types import ResourceSpec
from iris.units import format_memory, parse_duration, parse_memory


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1g", 2**30), ("512m", 512 * 2**20), ("1.5Gi", 3 * 2**29), ("100MB", 10**8), ("2048", 2048), (4096, 4096)],
)
def test_sizes_are_binary_unless_written_in_decimal_units(text: str | int, expected: int) -> None:
    assert expected == parse_memory(text)


def test_a_resource_request_of_1g_is_one_gibibyte() -> None:
    assert 2**30 == ResourceSpec(memory="1g").memory_bytes
    assert "1Gi" == format_memory(ResourceSpec(memory="1g").memory_bytes)


@pytest.mark.parametrize(("text", "expected"), [("30s", 30.0), ("10m", 600.0), ("1h30m", 5400.0), ("500ms", 0.5)])
def test_durations_read_as_written(text: str, expected: float) -> None:
    assert expected == parse_duration(text, "delay")


@pytest.mark.parametrize("text", ["1 parsec", "-1g", "1gg"])
def test_a_bad_size_names_the_field(text: str) -> None:
    with pytest.raises(ValueError, match=r"^memory: cannot parse"):
        parse_memory(text)


def test_a_bad_duration_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"^scale_down_delay: cannot parse 'soon'"):
        parse_duration("soon", "scale_down_delay")
