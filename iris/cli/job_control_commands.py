"""CLI of job control: what `iris job status` shows of dependencies and caps, and `iris schedule`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.table import Table

from iris.cli import run_options as ro
from iris.cli.common import StoreOpt, TemporalOpt, err, fail, iris_client, out
from iris.cli.run_options import as_flags, job_options
from iris.types import JobStatus


def job_control_lines(s: JobStatus) -> list[str]:
    """Lines `iris job status` prints about the job's dependencies and its cap on tasks placed at once."""
    lines = []
    if s.after:
        lines.append(f"after: {', '.join(s.after)} (after_rule={s.after_rule or 'succeeded'})")
    if s.max_concurrent:
        lines.append(f"max_concurrent: {s.max_concurrent} tasks placed at a time")
    return lines


schedule_app = typer.Typer(help="Schedules: jobs submitted on a cron (Temporal Schedules).", no_args_is_help=True)


def _when(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@schedule_app.command("create")
@ro.takes_job_flags
def schedule_create(
    name: Annotated[str, typer.Argument(help="the schedule's name (each job is NAME-<fire time>)")],
    command: ro.CommandArg,
    *,
    cron: Annotated[str, typer.Option("--cron", help="when: a cron expression, e.g. '0 3 * * *'")],
    timezone: Annotated[str, typer.Option("--timezone", help="the cron's time zone (IANA name)")] = "UTC",
    overlap: Annotated[
        str,
        typer.Option("--overlap", help="a firing while the last job runs: skip, buffer_one, allow_all, cancel_other"),
    ] = "skip",
    flags: ro.JobFlags,
    temporal: TemporalOpt = None,
    store: StoreOpt = None,
) -> None:
    """Create schedule NAME: at each firing of --cron, submit CMD as a job named NAME-<fire time> (the options
    are `iris run`'s)."""
    from iris.client.schedule_spec import check_schedule
    try:
        check_schedule(name, cron, timezone, overlap)
        options = job_options(command, name=None, **flags)
        options.pop("name")  # each firing's job is named by the schedule
    except ValueError as e:
        raise fail(_flag(str(e))) from None
    client = iris_client(temporal, store, start=True)
    try:
        client.create_command_schedule(name, command, cron=cron, timezone=timezone, overlap=overlap, **options)
    except ValueError as e:
        raise fail(_flag(str(e))) from None
    status = client.schedule(name).status()
    err.print(f"schedule [bold]{name}[/bold] created; next: {', '.join(_when(t) for t in status.next_runs)}")


def _flag(message: str) -> str:
    """A field's error as the flag's ("the schedule's name" is NAME, the positional argument)."""
    for field_name in ("cron", "timezone", "overlap"):
        if message.startswith(field_name):
            return "--" + field_name + message[len(field_name) :]
    if message.startswith("--name"):  # the schedule's own name (check_schedule says --name)
        return "NAME" + message[len("--name") :]
    if message.startswith("name"):
        return "NAME" + message[len("name") :]
    return as_flags(message)


@schedule_app.command("list")
def schedule_list(temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Every schedule: its cron, time zone, state, next firing and latest job."""
    table = Table("SCHEDULE", "CRON", "TIMEZONE", "STATE", "NEXT", "LAST JOB")
    for s in iris_client(temporal, store).list_schedules():
        table.add_row(s.name, s.cron, s.timezone, "paused" if s.paused else "active",
                      _when(s.next_runs[0]) if s.next_runs and not s.paused else "-",
                      s.recent_jobs[-1] if s.recent_jobs else "-")  # fmt: skip
    out.print(table)


def _act(name: str, temporal: str | None, store: str | None, action: str) -> None:
    ref = iris_client(temporal, store).schedule(name)
    getattr(ref, action)()
    err.print(f"schedule {name}: {action}d" if action.endswith("e") else f"schedule {name}: {action}ed")


@schedule_app.command("pause")
def schedule_pause(name: str, temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Stop firing (the jobs already started run on)."""
    _act(name, temporal, store, "pause")


@schedule_app.command("unpause")
def schedule_unpause(name: str, temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Fire again."""
    _act(name, temporal, store, "unpause")


@schedule_app.command("trigger")
def schedule_trigger(name: str, temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Submit one job now."""
    _act(name, temporal, store, "trigger")


@schedule_app.command("delete")
def schedule_delete(name: str, temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Delete the schedule (its jobs run on)."""
    _act(name, temporal, store, "delete")


@schedule_app.command("jobs")
def schedule_jobs(name: str, temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """The jobs the schedule started, oldest first."""
    client = iris_client(temporal, store)
    table = Table("JOB", "STATE", "TASKS", "ERROR")
    for job in client.schedule(name).jobs():
        s = client._run(client._async.visible_status(job.job_id))
        table.add_row(s.job_id, s.state, str(s.num_tasks), s.error[:80])
    out.print(table)
