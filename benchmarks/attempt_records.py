"""Attempt records: `task attempt worker what time` lines that tasks append while they run, read back as
spans, to show that no two attempts of one task ever ran at once (docs/reliability.md, "Leases").

Shared by the fencing bench and the fencing tests. A line cut short (its writer SIGKILLed mid-write) is
skipped.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path

Span = tuple[float, float]


def records(path: Path) -> list[tuple[str, str, str, str, float]]:
    """The whole records in `path` (none if it does not exist yet): (task, attempt, worker, what, time)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    whole = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 5:
            try:
                whole.append((parts[0], parts[1], parts[2], parts[3], float(parts[4])))
            except ValueError:
                continue
    return whole


def spans(path: Path) -> dict[str, dict[str, Span]]:
    """task -> attempt -> (first, last) record time."""
    found: dict[str, dict[str, Span]] = defaultdict(dict)
    for task, attempt, _, _, at in records(path):
        first, last = found[task].get(attempt, (at, at))
        found[task][attempt] = (min(first, at), max(last, at))
    return found


def overlaps(path: Path) -> list[str]:
    """Every pair of attempts of one task whose spans overlap."""
    return [f"{task}: {overlap}" for task, attempts in spans(path).items() for overlap in _pairs(attempts)[0]]


def gaps(path: Path) -> list[float]:
    """Seconds from each attempt's last record to the next attempt's first (those that do not overlap)."""
    return [gap for attempts in spans(path).values() for gap in _pairs(attempts)[1]]


def _pairs(attempts: dict[str, Span]) -> tuple[list[str], list[float]]:
    found, between = [], []
    ordered = sorted(attempts.items(), key=lambda item: item[1])
    for (a, (_, a_end)), (b, (b_start, _)) in itertools.pairwise(ordered):
        if b_start <= a_end:
            found.append(f"attempt {a} ran until {a_end:.3f}, attempt {b} started {b_start:.3f}")
        else:
            between.append(b_start - a_end)
    return found, between


def ends(path: Path) -> dict[str, int]:
    """task -> how many of its attempts recorded their end."""
    counts: dict[str, int] = defaultdict(int)
    for task, _, _, what, _ in records(path):
        counts[task] += what == "end"
    return dict(counts)


def first_worker(path: Path, task_suffix: str) -> str:
    """The worker of the first attempt of the task whose id ends with `task_suffix`."""
    for task, attempt, worker, _, _ in records(path):
        if task.endswith(task_suffix) and attempt == "0":
            return worker
    raise AssertionError(f"no record of {task_suffix}")
