"""Attempt records: `task attempt worker what time` lines that tasks append while they run, read back as
spans, to show that no two attempts of one task ever ran at once (docs/reliability.md, "Leases")."""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path

from tests.support import lines

Span = tuple[float, float]


def spans(records: Path) -> dict[str, dict[str, Span]]:
    """task -> attempt -> (first, last) record time."""
    found: dict[str, dict[str, Span]] = defaultdict(dict)
    for line in lines(records):
        task, attempt, _, _, at = line.split()
        first, last = found[task].get(attempt, (float(at), float(at)))
        found[task][attempt] = (min(first, float(at)), max(last, float(at)))
    return found


def overlaps(records: Path) -> list[str]:
    """Every pair of attempts of one task whose spans overlap."""
    found = []
    for task, attempts in spans(records).items():
        ordered = sorted(attempts.items(), key=lambda item: item[1])
        for (a, (_, a_end)), (b, (b_start, _)) in itertools.pairwise(ordered):
            if b_start <= a_end:
                found.append(f"{task}: attempt {a} ran until {a_end:.3f}, attempt {b} started {b_start:.3f}")
    return found


def ends(records: Path) -> dict[str, int]:
    """task -> how many of its attempts recorded their end."""
    counts: dict[str, int] = defaultdict(int)
    for line in lines(records):
        task, _, _, what, _ = line.split()
        counts[task] += what == "end"
    return dict(counts)


def first_worker(records: Path, task_suffix: str) -> str:
    """The worker of the first attempt of the task whose id ends with `task_suffix`."""
    for line in lines(records):
        task, attempt, worker, _, _ = line.split()
        if task.endswith(task_suffix) and attempt == "0":
            return worker
    raise AssertionError(f"no record of {task_suffix}")
