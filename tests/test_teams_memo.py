"""The team table the scheduler publishes: use per team, what is borrowed, and who lent it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from iris.client.views.team_tables import QueueView, queue_from_memo, teams_from_memo
from scheduler.teams import Team, Teams
from scheduler.types import Resources
from workflows.scheduler.placement_index import Placement, Placements
from workflows.scheduler.teams_memo import QUEUE_MEMO, TEAMS_MEMO, queue_memo, teams_memo

TEAMS = Teams(
    (Team("a", ("ana",), Resources(8000)), Team("b", ("bo",), Resources(8000), lending_limit=Resources(6000)))
)


def job(job_id: str, user: str, tasks: int) -> dict[str, Placement]:
    return {
        f"{job_id}/task-{i}": Placement(job_id, i, 0, f"w{i}", 1000, 1 << 20, 0, 0, user=user) for i in range(tasks)
    }


def shapes(*jobs: dict[str, Placement]) -> list[tuple[Any, int]]:
    """The placements' runs by shape, as the scheduler hands them to the table."""
    placements = Placements()
    for placed in jobs:
        placements.update(placed)
    return list(placements.shapes())


def test_a_borrowers_use_shows_as_borrowed_and_as_lent_by_the_idle_team() -> None:
    """a runs 12 of a 16-core fleet under quotas of 8 + 8: 4 borrowed, lent by b; cy (no team) shows as default."""
    jobs = shapes(job("a/1", "ana", 8), job("a/2", "ana", 4), job("b/1", "bo", 1), job("cy/1", "cy", 1))
    rows = teams_memo(TEAMS, jobs, {"bo": 2}, [16000, 1 << 40, 0, 0])
    table = {t.team: t for t in teams_from_memo({TEAMS_MEMO: rows})}
    assert ["a", "b", "default"] == list(table)
    assert (12.0, 4.0, 0.0) == (table["a"].used["cpu"], table["a"].borrowed["cpu"], table["a"].lent["cpu"])
    assert (1.0, 0.0, 5.0, 2) == (table["b"].used["cpu"], table["b"].borrowed["cpu"], table["b"].lent["cpu"],
                                  table["b"].pending_jobs)  # fmt: skip
    assert (1.0, 1.0) == (table["default"].used["cpu"], table["default"].borrowed["cpu"])
    # Memory is used but no team has a quota of it: it is neither borrowed nor lent (only covered resources are).
    assert table["a"].used["memory"] > 0
    assert [0.0] == sorted({t.borrowed["memory"] for t in table.values()} | {t.lent["memory"] for t in table.values()})
    assert "default" == QueueView.from_memo({TEAMS_MEMO: rows}).team_of_user.get("cy", "default")
    # With nobody in it, `default` is listed all the same: where users in no team are.
    assert ["a", "b", "default"] == [r[0] for r in teams_memo(TEAMS, [], {}, [16000, 1 << 40, 0, 0])]


def test_the_queue_table_shows_the_band_a_job_is_scheduled_in_and_no_start_already_past() -> None:
    """A demoted job is listed in the band it waits in (the table's order), not the one it asked for; an
    estimate is rounded up to the minute, so it never reads as a minute already gone."""
    spec = SimpleNamespace(user="ana", band="interactive")
    pending = {"j1": SimpleNamespace(spec=spec), "j2": SimpleNamespace(spec=spec)}
    entries = [SimpleNamespace(job_id="j1", estimated_start=1_000_000.0, basis="b"),
               SimpleNamespace(job_id="j2", estimated_start=1_000_021.0, basis="b")]  # fmt: skip
    rows = queue_from_memo({QUEUE_MEMO: queue_memo(entries, pending, TEAMS, {"j2": "batch"})})
    assert [("j1", "interactive"), ("j2", "batch")] == [(r.job_id, r.band) for r in rows]
    assert rows[0].estimated_start is not None and rows[1].estimated_start is not None
    assert rows[0].estimated_start.timestamp() >= 1_000_000.0 and rows[1].estimated_start.timestamp() >= 1_000_021.0
    assert 0 == rows[1].estimated_start.timestamp() % 60
