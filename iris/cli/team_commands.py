"""`iris team list` and `iris queue`: the team table and the queue the scheduler publishes."""

from __future__ import annotations

import typer
from rich.table import Table

from iris.cli.common import StoreOpt, TemporalOpt, iris_client, out
from iris.types import JobStatus

team_app = typer.Typer(help="Teams: guaranteed quotas, use, borrowed and lent capacity.", no_args_is_help=True)


def place_line(status: JobStatus) -> str:
    """`iris job status`'s line on a pending job's place in the queue ("" when it has none)."""
    from iris.client.views.team_tables import when
    if status.queue_position is None:
        return ""
    return f"queue position: {status.queue_position}  estimated start: {when(status.estimated_start)}" + (
        f" ({status.estimate_basis})" if status.estimate_basis else ""
    )


@team_app.command("list")
def team_list(temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Every team: members, guaranteed quota, what it uses, what it borrows and lends, its pending jobs."""
    from iris.client.views.team_tables import amounts
    table = Table("TEAM", "MEMBERS", "QUOTA", "USED", "BORROWED", "LENT", "PENDING")
    for t in iris_client(temporal, store).list_teams():
        table.add_row(t.team, ", ".join(t.members) or "-", amounts(t.quota), amounts(t.used), amounts(t.borrowed),
                      amounts(t.lent), str(t.pending_jobs))  # fmt: skip
    out.print(table)


def queue_list(temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """The waiting jobs in the order the scheduler tries them, with estimated starts."""
    from iris.client.views.team_tables import when
    table = Table("POS", "JOB", "USER", "TEAM", "BAND", "ESTIMATED START")
    for row in iris_client(temporal, store).queue():
        table.add_row(str(row.position), row.job_id, row.user, row.team, row.band, when(row.estimated_start))
    out.print(table)
