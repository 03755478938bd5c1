"""The scheduler's recent actions: what it placed, requeued and cordoned, newest last, bounded.

Why here: visibility already records when jobs, worker sessions and slices start and end (the
dashboard's actions log reads those), but not what happens inside the scheduler. These moments
live in the scheduler's own state, so they are as durable as it is (replayed, carried across
continue-as-new) and cost no extra events: a ring of the last ACTIONS_KEPT, read through one query
per dashboard refresh. A pass that places a big job records one action for the job, not one per task.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

ACTIONS_KEPT = 500
MAX_DETAIL = 200

# A row: [at (epoch seconds), what, kind ("job" | "worker"), subject id, detail, ok]
ActionRow = list[float | str | bool]


def new_ring(rows: Iterable[ActionRow] = ()) -> deque[ActionRow]:
    return deque(rows, maxlen=ACTIONS_KEPT)


def record(
    ring: deque[ActionRow], at: float, what: str, kind: str, subject: str, detail: str = "", ok: bool = True
) -> None:
    """Append one action; the oldest falls out when the ring is full."""
    if len(detail) > MAX_DETAIL:
        detail = detail[: MAX_DETAIL - 1] + "…"
    ring.append([at, what, kind, subject, detail, ok])


def placed_detail(task_indexes: Sequence[int], workers: Sequence[str]) -> str:
    """'tasks 0-3 on w1, w2' for one job's placements in one pass."""
    indexes = sorted(task_indexes)
    if len(indexes) == 1:
        tasks = f"task {indexes[0]}"
    elif indexes == list(range(indexes[0], indexes[-1] + 1)):
        tasks = f"tasks {indexes[0]}-{indexes[-1]}"
    else:
        tasks = f"{len(indexes)} tasks"
    distinct = sorted(set(workers))
    shown = ", ".join(distinct[:4]) + (f" and {len(distinct) - 4} more" if len(distinct) > 4 else "")
    return f"{tasks} on {shown}"
