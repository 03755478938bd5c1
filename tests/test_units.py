"""Sizes and durations as users write them: binary sizes ("1g" is 2**30) and "30s"-style durations.

Why a test: pydantic's `ByteSize` would read "1g" as 10**9 and its `timedelta` refuses "30s"
(see iris.units); these pin the meanings the public API and config files promise.
"""

from __future__ import annotations

import pytest

from iris.client.submission import build_request
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


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"memory": 1 << 70}, r"^resources\.memory: must be at most 9223372036854775807 bytes, got 1180591620\d+$"),
        ({"memory": "9" * 20 + "g"}, r"^resources\.memory: must be at most 9223372036854775807 bytes, got '9+g"),
        ({"memory": 2**63}, r"^resources\.memory: must be at most 9223372036854775807 bytes"),
        ({"cpu": 10**30}, r"^resources\.cpu: must be at most 9223372036854774 cores, got 10+$"),
        ({"cpu": "1e30"}, r"^resources\.cpu: must be at most 9223372036854774 cores, got '1e30'$"),
        ({"gpus": 1 << 40}, r"^resources\.gpus must be at most 2147483647, got 1099511627776$"),
    ],
)
def test_a_resource_too_big_for_the_wire_names_its_field(spec: dict[str, object], message: str) -> None:
    """cpu and memory travel as int64, gpus as int32: a bigger request is refused at construction naming the field
    and the largest allowed value (protobuf's "Value out of range" at submit named neither)."""
    with pytest.raises(ValueError, match=message):
        ResourceSpec(**spec)  # type: ignore[arg-type]


@pytest.mark.parametrize("cpu", [0.0004, 1e-9, "0.0004", "0.5m"])
def test_a_cpu_below_the_granularity_names_cpu(cpu: float | str) -> None:
    """cpu has a granularity of 1/1000: a smaller request is refused naming cpu, not silently made 0."""
    with pytest.raises(ValueError, match=r"^resources\.cpu: must be 0 or at least 0\.001 cores \(granularity 1/1000\)"):
        ResourceSpec(cpu=cpu)


@pytest.mark.parametrize(("cpu", "millis"), [(0, 0), (0.0, 0), ("0", 0), (0.001, 1), ("1m", 1), (0.0015, 2)])
def test_cpu_of_0_or_of_at_least_a_millicore_is_accepted(cpu: float | str, millis: int) -> None:
    """No cpu at all stays allowed; from 0.001 up, cpu is rounded to the nearest millicore."""
    assert millis == ResourceSpec(cpu=cpu).cpu_millis


@pytest.mark.parametrize("memory", [1.5, "1.5", "1.5b", "2.25 B"])
def test_a_fraction_of_a_byte_names_memory(memory: float | str) -> None:
    """A number of bytes is whole: 1.5 (or "1.5") bytes is refused naming memory, not truncated to 1 byte."""
    with pytest.raises(ValueError, match=r"^resources\.memory: a number of bytes must be whole"):
        ResourceSpec(memory=memory)


@pytest.mark.parametrize("memory", [1, 4096, "1k", "1.5k", 2**20 - 1, 2048.0])
def test_a_task_memory_below_1mib_names_memory(memory: float | str) -> None:
    """Below 1MiB no process starts (the task failed with a bare "cannot start task"): refused naming memory."""
    with pytest.raises(ValueError, match=r"^resources\.memory: must be 0 \(no limit\) or at least 1MiB, got"):
        ResourceSpec(memory=memory)


@pytest.mark.parametrize(("memory", "expected"), [(0, 0), ("1m", 2**20), (2**20, 2**20), (1.5 * 2**30, 3 * 2**29)])
def test_a_task_memory_of_0_or_from_1mib_is_accepted(memory: float | str, expected: int) -> None:
    """0 asks for no memory limit; from 1MiB up any whole number of bytes (a float too, when whole) is a request."""
    assert expected == ResourceSpec(memory=memory).memory_bytes


def test_the_largest_resources_the_wire_carries_are_accepted() -> None:
    """The bounds are the wire's, not smaller: 2**63 - 1 bytes and 2**31 - 1 gpus are requests like any other."""
    spec = ResourceSpec(cpu=9223372036854774, memory=2**63 - 1, gpus=2**31 - 1)
    assert (9223372036854774000, 2**63 - 1) == (spec.cpu_millis, spec.memory_bytes)
    resources = build_request(resources=spec).resources
    assert (spec.cpu_millis, spec.memory_bytes, spec.gpus) == (
        resources.cpu_millis, resources.memory_bytes, resources.gpus
    )
