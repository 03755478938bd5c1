"""What the scheduler publishes about teams and the queue, for `list_teams`, `iris queue` and `JobStatus`.

Pure functions of the scheduler's state and its last plan (no Temporal calls). The scheduler puts
the rows in its memo with the user table (workflows/scheduler/scheduler_sharing.py); views read them with one
describe call (Decision 10), never a query per job.

- `TEAMS_MEMO`: one row per team, `[team, members, quota, used, borrowed, lent, pending_jobs]`,
  resources as `[cpu_millis, memory_bytes, gpus, tpus]`. `used` is what its running tasks hold,
  `borrowed` what of it is beyond its quota, `lent` what of its idle quota other teams use: the
  borrowed total beyond the capacity no quota covers, shared among lenders in proportion to the
  idle quota each may lend.
- `QUEUE_MEMO`: the first waiting jobs in the order the last pass tried them,
  `[job_id, user, team, band, estimated_start, basis]` (estimated_start: workflow time, 0 = cannot say).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.teams import DEFAULT_TEAM, UNLIMITED, Teams

TEAMS_MEMO = "teams"
QUEUE_MEMO = "queue"
MAX_QUEUE_ROWS = 200  # ~150 bytes each: every upsert of the memo is an event in the scheduler's history
RECENT_DURATIONS = 256  # finished attempts whose durations give the typical task duration


def new_durations() -> deque[float]:
    return deque(maxlen=RECENT_DURATIONS)


def typical_seconds(durations: Iterable[float]) -> float:
    """The median of recent task durations; 0 when none finished yet."""
    values = list(durations)
    return statistics.median(values) if values else 0.0


def teams_memo(
    teams: Teams, shapes: Iterable[tuple[Any, int]], pending_by_user: Mapping[str, int], fleet: list[int]
) -> list[list[Any]]:
    """The team table (see the module). `shapes` are the scheduler's running placements by shape
    (`Placements.shapes`: a placement's user and request, and how many placements share them, so this walks
    jobs' runs, not tasks), `fleet` the healthy workers' total capacity."""
    if not teams:
        return []
    used: dict[str, list[int]] = {}
    for p, n in shapes:
        if not n:
            continue
        team = teams.team_of(p.user)
        row = used.get(team)
        if row is None:
            row = used[team] = [0, 0, 0, 0]
        row[0] += p.cpu_millis * n
        row[1] += p.memory_bytes * n
        row[2] += p.gpus * n
        row[3] += p.tpus * n
    pending: dict[str, int] = {}
    for user, count in pending_by_user.items():
        team = teams.team_of(user)
        pending[team] = pending.get(team, 0) + count
    names = teams.names([DEFAULT_TEAM, *used, *pending])  # `default` always: where users in no team are
    quota = {name: _vector(teams.get(name).quota) for name in names}
    zero = [0, 0, 0, 0]
    covered = teams.covered()  # a resource no team has a quota of is neither borrowed nor lent (scheduler.teams)
    borrowed = {n: [max(0, u - q) if c else 0 for u, q, c in zip(used.get(n, zero), quota[n], covered, strict=True)]
                for n in names}  # fmt: skip
    lendable: dict[str, list[int]] = {}
    for name in names:
        limit = teams.get(name).lending_limit
        lend = _vector(limit) if limit is not None else list(UNLIMITED)
        lendable[name] = [min(max(0, q - u), cap) for q, u, cap in zip(quota[name], used.get(name, zero), lend,
                                                                        strict=True)]  # fmt: skip
    total_quota = [sum(quota[n][d] for n in names) for d in range(4)]
    lent = {name: [0, 0, 0, 0] for name in names}
    for d in range(4):
        beyond = sum(b[d] for b in borrowed.values()) - max(0, fleet[d] - total_quota[d])
        supply = sum(v[d] for v in lendable.values())
        if beyond > 0 and supply > 0:
            for name in names:
                lent[name][d] = min(lendable[name][d], round(beyond * lendable[name][d] / supply))
    return [[name, list(teams.get(name).members), quota[name], used.get(name, zero), borrowed[name], lent[name],
             pending.get(name, 0)] for name in names]  # fmt: skip


def queue_memo(
    entries: Iterable[Any], pending: Mapping[str, Any], teams: Teams, bands: Mapping[str, str]
) -> list[list[Any]]:
    """The queue table from a plan's `queue` entries; jobs that left the queue since are skipped. A job's band
    is the one it is scheduled in (`bands`: a demoted job's), the order the table is in."""
    rows = []
    for e in entries:
        entry = pending.get(e.job_id)
        if entry is None:
            continue
        user = entry.spec.user
        # Up to the minute (the table changes only when an estimate does), never to a minute already past.
        start = math.ceil(e.estimated_start / 60.0) * 60.0
        band = bands.get(e.job_id) or entry.spec.band or "interactive"
        rows.append([e.job_id, user, teams.team_of(user), band, start, e.basis])
        if len(rows) == MAX_QUEUE_ROWS:
            break
    return rows


def _vector(r: Any) -> list[int]:
    return [r.cpu_millis, r.memory_bytes, r.gpus, r.tpus]
