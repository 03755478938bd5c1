"""Teams and the queue as the client sees them: the tables the scheduler publishes in its memo.

`list_teams`, `queue` and the team / position / estimate fields of `JobStatus` read the scheduler
workflow's memo (one describe call per listing or status), never a query per job (Decision 10). The
scheduler refreshes the tables with the user table (workflows/scheduler/teams_memo.py): at most every few
seconds while work is queued, at once when the queue empties.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from activities.contracts import SCHEDULER_WORKFLOW_ID
from iris.types import JobState, JobStatus, TeamStatus
from scheduler.reasons import format_bytes
from scheduler.teams import DEFAULT_TEAM, DIMENSIONS, UNLIMITED
from workflows.scheduler.teams_memo import QUEUE_MEMO, TEAMS_MEMO

if TYPE_CHECKING:  # the SDK only to read the memo: the tables and their formats serve team mode's CLI without it
    from temporalio.client import Client


@dataclass(frozen=True)
class QueueRow:
    """One waiting job in scheduling order (`iris queue`)."""

    position: int
    job_id: str
    user: str
    team: str
    band: str
    estimated_start: datetime | None
    estimate_basis: str


def _resources(row: Sequence[int]) -> dict[str, float]:
    """[cpu_millis, memory_bytes, gpus, tpus] as the config's keys: cpu in cores, the rest as counted."""
    values = [row[0] / 1000, row[1], row[2], row[3]]
    return {key: value for key, value, raw, cap in zip(DIMENSIONS, values, row, UNLIMITED, strict=True) if raw < cap}


def teams_from_memo(memo: Mapping[str, Any]) -> list[TeamStatus]:
    """The published team rows as TeamStatus values, in config order (then `default`)."""
    rows = memo.get(TEAMS_MEMO) or []
    out = []
    for r in rows:
        quota, used, borrowed, lent = (_resources(r[i]) for i in range(2, 6))
        out.append(TeamStatus(str(r[0]), tuple(r[1]), quota, used, borrowed, lent, int(r[6])))
    return out


def _when(value: float) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if value > 0 else None


def queue_from_memo(memo: Mapping[str, Any]) -> list[QueueRow]:
    """The published queue rows, position 1 first."""
    return [
        QueueRow(i, str(r[0]), str(r[1]), str(r[2]), str(r[3]), _when(float(r[4])), str(r[5]))
        for i, r in enumerate(memo.get(QUEUE_MEMO) or [], start=1)
    ]


async def scheduler_memo(client: Client) -> Mapping[str, Any]:
    """The scheduler's memo (empty when no controller ever started)."""
    from temporalio.service import RPCError, RPCStatusCode

    try:
        desc = await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return {}
        raise
    return await desc.memo()


@dataclass(frozen=True)
class QueueView:
    """What `JobStatus` takes from the scheduler's memo: each user's team and each waiting job's place."""

    team_of_user: Mapping[str, str]
    places: Mapping[str, QueueRow]
    spent: frozenset[str] = frozenset()  # users with no credits left: their pending work is scheduled as batch

    @classmethod
    def from_memo(cls, memo: Mapping[str, Any]) -> QueueView:
        from iris.client.views.user_balances import users_from_memo

        teams = {member: row.team for row in teams_from_memo(memo) for member in row.members}
        spent = frozenset(u.user for u in users_from_memo(memo) if u.credits <= 0)
        return cls(teams, {row.job_id: row for row in queue_from_memo(memo)}, spent)

    def apply(self, status: JobStatus) -> JobStatus:
        """The status with its team and, while it is PENDING, its position, estimated start and the band it is
        scheduled in (batch for a user with no credits left, as the scheduler does, before its first pass says so)."""
        team = self.team_of_user.get(status.user, DEFAULT_TEAM)
        pending = status.state == JobState.PENDING
        if pending and status.user in self.spent and status.effective_priority != "batch":
            status = replace(status, effective_priority="batch")
        place = self.places.get(status.job_id) if pending else None
        if place is None:
            return replace(status, team=team)
        return replace(status, team=team, queue_position=place.position, estimated_start=place.estimated_start,
                       estimate_basis=place.estimate_basis)  # fmt: skip


def amounts(resources: dict[str, float]) -> str:
    """{"cpu": 8.0, "memory": 34359738368, "gpus": 0, "tpu": 16} -> "cpu 8, memory 32GiB, tpu 16" (zeros left out)."""
    parts = []
    for key, value in resources.items():
        if value:
            shown = format_bytes(int(value)) if key == "memory" else f"{value:g}"
            parts.append(f"{key} {shown}")
    return ", ".join(parts) or "-"


def when(moment: datetime | None) -> str:
    """An estimated start as "14:05 UTC (in 12 min)", or "unknown"."""
    if moment is None:
        return "unknown"
    minutes = max(0, round((moment - datetime.now(UTC)).total_seconds() / 60))
    return f"{moment:%H:%M} UTC (in {minutes} min)"


VIEW_SECONDS = 2.0  # a client reuses the scheduler's tables this long: a poll loop is not a describe loop


_views: dict[int, tuple[float, QueueView]] = {}


async def queue_view(client: Client) -> QueueView:
    """The tables as of at most VIEW_SECONDS ago (the scheduler publishes them every few seconds anyway)."""
    now = time.monotonic()
    found = _views.get(id(client))
    if found is not None and now - found[0] < VIEW_SECONDS:
        return found[1]
    view = QueueView.from_memo(await scheduler_memo(client))
    if len(_views) > 64:
        _views.clear()
    _views[id(client)] = (now, view)
    return view


async def list_teams(client: Client) -> list[TeamStatus]:
    """Every configured team (and `default` when someone in no team has work), as the scheduler publishes it."""
    return teams_from_memo(await scheduler_memo(client))


async def queue(client: Client) -> list[QueueRow]:
    """The waiting jobs in the order the scheduler tries them (the first 200)."""
    return queue_from_memo(await scheduler_memo(client))
