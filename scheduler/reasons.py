"""Pending reasons: short, user-readable answers to "why is my job not running?".

Every filter of the pipeline charges each worker it rejects to itself (a worker
is charged to the first filter that rejects it), and these helpers turn the
counts into text such as "0/6 workers: 4 lack tpu-topology=v5e-16, 2 have < 64
free cpu". Quantities are printed the way users asked for them: cpu in cores,
memory in binary units.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scheduler.attributes import describe
from scheduler.types import TAINT_PREFIX, Constraint, Op, Resources, WorkerSnapshot

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_cores(millis: int) -> str:
    """Render millicores as cores: 64000 -> "64", 500 -> "0.5"."""
    return f"{millis / 1000:g}"


def format_bytes(size: int) -> str:
    """Render a byte count in binary units with at most one decimal: 34359738368 -> "32GiB"."""
    value = float(size)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            text = f"{value:.1f}".rstrip("0").rstrip(".")
            return f"{text}{unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def constraint_rejection(constraint: Constraint, count: int) -> str:
    """Phrase the workers a constraint rejected: "4 lack zone=a", "2 are tainted maintenance"."""
    if constraint.op == Op.NOT_EXISTS and constraint.key.startswith(TAINT_PREFIX):
        return f"{count} tainted {constraint.key[len(TAINT_PREFIX) :]}"
    if constraint.op == Op.NOT_EXISTS:
        return f"{count} have {constraint.key}"
    return f"{count} lack {describe(constraint)}"


def capacity_rejection(dimension: str, count: int, request: Resources) -> str:
    """Phrase the workers short of one resource: "2 have < 64 free cpu"."""
    wanted = {
        "cpu": format_cores(request.cpu_millis),
        "memory": format_bytes(request.memory_bytes),
        "gpus": str(request.gpus),
        "tpus": str(request.tpus),
    }[dimension]
    return f"{count} have < {wanted} free {dimension}"


def first_short_dimension(request: Resources, cpu: int, memory: int, gpus: int, tpus: int) -> str | None:
    """Return the first resource dimension a worker's free capacity cannot cover, or None if it fits."""
    if cpu < request.cpu_millis:
        return "cpu"
    if memory < request.memory_bytes:
        return "memory"
    if gpus < request.gpus:
        return "gpus"
    if tpus < request.tpus:
        return "tpus"
    return None


def join_counts(parts: Sequence[str]) -> str:
    """Join the non-empty rejection phrases; counts of zero were dropped by the caller."""
    return ", ".join(parts) if parts else "no filter rejected them"


def format_amount(r: Resources) -> str:
    """A request in words: "2 cpu, 4GiB, 1 gpus" (gpus and tpus only when asked for)."""
    parts = [f"{format_cores(r.cpu_millis)} cpu", format_bytes(r.memory_bytes)]
    if r.gpus:
        parts.append(f"{r.gpus} gpus")
    if r.tpus:
        parts.append(f"{r.tpus} tpus")
    return ", ".join(parts)


def reservation_shortfall(dimension: str, count: int, request: Resources) -> str:
    """Phrase a reservation's workers short of one resource for a task of its tree: "2 have < 1 cpu left in it"."""
    return capacity_rejection(dimension, count, request).replace(" free ", " ", 1) + " left in it"


def largest_worker(shapes: Iterable[WorkerSnapshot]) -> Resources:
    """Per resource, the most that any one worker has in all (its free capacity when its total is unknown)."""
    most = [0, 0, 0, 0]
    for w in shapes:
        r = w.capacity or w.free
        most = [max(most[0], r.cpu_millis), max(most[1], r.memory_bytes), max(most[2], r.gpus), max(most[3], r.tpus)]
    return Resources(*most)


def beyond_every_worker(request: Resources, largest: Resources) -> str:
    """What one task asks that no worker has even when idle ("none has 4 cpu in all (the largest: 2)"), or "".

    Such a job waits until a bigger worker joins; said apart, so its reason does not read as a wait for
    capacity to free up.
    """
    short = [
        (format_cores(request.cpu_millis), "cpu", format_cores(largest.cpu_millis))
        if request.cpu_millis > largest.cpu_millis else None,
        (format_bytes(request.memory_bytes), "memory", format_bytes(largest.memory_bytes))
        if request.memory_bytes > largest.memory_bytes else None,
        (str(request.gpus), "gpus", str(largest.gpus)) if request.gpus > largest.gpus else None,
        (str(request.tpus), "tpus", str(largest.tpus)) if request.tpus > largest.tpus else None,
    ]  # fmt: skip
    parts = [f"{want} {what} in all (the largest: {most})" for want, what, most in filter(None, short)]
    return f"none has {' or '.join(parts)}" if parts else ""
