"""Pure helpers that turn what the dashboard read into what a page shows: filters, pages, trees, sums.

No I/O here, so each is tested with plain values and costs what its input costs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from activities.proto import cluster_pb2 as pb
from activities.proto.values import get_attr
from iris.dashboard.charts import Usage
from iris.dashboard.reads import JobRow

T = TypeVar("T")
PAGE_SIZE = 50


@dataclass(frozen=True)
class Slice(Generic[T]):
    """One page of an in-memory list: its rows, where it starts (0-based), and the list's length."""

    rows: list[T]
    start: int
    total: int
    page: int
    pages: int


def paginate(items: Sequence[T], page: int, size: int = PAGE_SIZE) -> Slice[T]:
    """Page `page` (1-based, clamped into range) of `items`."""
    pages = max(1, -(-len(items) // size))
    page = min(max(1, page), pages)
    start = (page - 1) * size
    return Slice(list(items[start : start + size]), start, len(items), page, pages)


def parse_page(text: str | None) -> int:
    try:
        return max(1, int(text or 1))
    except ValueError:
        return 1


# -- workers


def attributes(worker: pb.WorkerStatus) -> dict[str, object]:
    return {k: get_attr(v) for k, v in sorted(worker.attributes.items())}


def worker_state(worker: pb.WorkerStatus) -> str:
    if not worker.healthy:
        return "lost"
    return "cordoned" if worker.cordoned else "healthy"


@dataclass(frozen=True)
class WorkerFilter:
    """`text` in the worker id, a state (healthy, lost, cordoned, busy, idle), an attribute `k=v` or `k`.

    The scheduler applies it to its registry (`workflows.scheduler.scheduler_dashboard`) and sends one page.
    """

    text: str = ""
    state: str = ""
    attribute: str = ""

    def request(self, offset: int, limit: int) -> pb.DashboardWorkersRequest:
        return pb.DashboardWorkersRequest(text=self.text, state=self.state, attribute=self.attribute,
                                          offset=offset, limit=limit)  # fmt: skip


def group_usage(answer: pb.DashboardWorkers) -> list[Usage]:
    """CPU cores committed and offered by the healthy workers of each scale group, as the scheduler summed them."""
    return [Usage(g.group, round(g.used_cpu_millis / 1000, 3), round(g.cpu_millis / 1000, 3), "cpu")
            for g in answer.groups]  # fmt: skip


# -- jobs


def as_tree(rows: Sequence[JobRow]) -> list[tuple[int, JobRow]]:
    """Rows with their depth, each child after its parent when both are on the page (else in place).

    A child names its parent (`JobRow.parent`, or an id `PARENT/CHILD`); until jobs have parents
    every row is a root and the order is the listing's.
    """
    by_id = {r.job_id: r for r in rows}
    children: dict[str, list[JobRow]] = {}
    roots: list[JobRow] = []
    for r in rows:
        parent = r.parent or (r.job_id.rsplit("/", 1)[0] if "/" in r.job_id else "")
        if parent and parent in by_id and parent != r.job_id:
            children.setdefault(parent, []).append(r)
        else:
            roots.append(r)
    out: list[tuple[int, JobRow]] = []
    seen: set[str] = set()

    def walk(row: JobRow, depth: int) -> None:
        if row.job_id in seen:
            return
        seen.add(row.job_id)
        out.append((depth, row))
        for child in children.get(row.job_id, []):
            walk(child, depth + 1)

    for r in roots:
        walk(r, 0)
    for r in rows:  # a cycle of parents (never expected): still shown
        walk(r, 0)
    return out


def duration(start: float, end: float | None, now: float | None = None) -> str:
    """`1h 02m`, `3m 04s`, `5.2s`: how long from start to end (or now)."""
    if not start:
        return ""
    seconds = max(0.0, (end or (now if now is not None else time.time())) - start)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    return f"{hours // 24}d {hours % 24}h"


def task_counts(counts: dict[str, int]) -> list[tuple[str, int]]:
    """A job's non-zero task counts in lifecycle order."""
    order = ["PENDING", "ASSIGNED", "RUNNING", "SUCCEEDED", "FAILED", "KILLED", "WORKER_FAILED", "UNSCHEDULABLE"]
    known = [(s, counts[s]) for s in order if counts.get(s)]
    return known + [(s, n) for s, n in sorted(counts.items()) if n and s not in order]
