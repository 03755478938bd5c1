"""Operators' commands: `iris logs controller|worker [ID]`, `iris logs list`, `iris job bug-report JOB`,
`iris autoscaler status`."""

from __future__ import annotations

import re
import sys
import time
from typing import Annotated

import typer
from rich.table import Table

from iris.cli.common import StoreOpt, TemporalOpt, err, fail, iris_client, out
from iris.cli.fleet_commands import _age
from iris.cli.parsing import parse_since

logs_app = typer.Typer(help="The controllers' and agents' own logs, from the store.", no_args_is_help=True)

SinceOpt = Annotated[
    str | None, typer.Option("--since", help="only lines written since: a DURATION ago (30s, 10m, 1h) or a TIME")
]
TailOpt = Annotated[int | None, typer.Option("--tail", min=0, help="only the last N lines")]
FollowOpt = Annotated[bool, typer.Option("-f", "--follow", help="keep printing new lines until interrupted")]
FOLLOW_POLL_SECONDS = 1.0


def _store_url(temporal: str | None, store: str | None) -> str:
    """The store named by --store, else the one the cluster reports."""
    return store or iris_client(temporal, store).store_url


def _ago(when: float | None) -> str:
    return "-" if when is None else f"{_age(when)} ago"


@logs_app.command("list")
def logs_list(temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Which controllers and workers have logs in the store, and when each last wrote."""
    from iris.controller import daemon_logs  # the store's machinery (fsspec, cryptography): only when read

    url = _store_url(temporal, store)
    table = Table("KIND", "ID", "SEGMENTS", "LAST WRITTEN")
    for kind in daemon_logs.KINDS:
        logs = daemon_logs.daemon_log_store(url, kind)
        for daemon_id in daemon_logs.daemon_ids(url, kind):
            table.add_row(kind, daemon_id, str(len(logs.attempts(daemon_id, 0))),
                          _ago(daemon_logs.last_written(logs, daemon_id)))  # fmt: skip
    out.print(table)


def _print_daemon_log(
    kind: str, daemon_id: str | None, since: str | None, tail: int | None, follow: bool,
    temporal: str | None, store: str | None,
) -> None:
    from iris.cli.log_output import LogFollower, LogPrinter
    from iris.controller import daemon_logs

    try:
        since_time = parse_since(since) if since is not None else None
    except ValueError as e:
        raise fail(str(e)) from None
    url = _store_url(temporal, store)
    known = daemon_logs.daemon_ids(url, kind)
    if daemon_id is None and len(known) == 1:
        daemon_id = known[0]  # the usual case: one controller
    elif daemon_id is None:
        for known_id in known:
            out.print(known_id, markup=False, highlight=False)
        err.print(f"name one: iris logs {kind} ID" if known else f"no {kind} has written logs to {url}",
                  markup=False, highlight=False)
        return
    if daemon_id not in known:
        hint = f"; {kind}s with logs: {', '.join(known)}" if known else f"; no {kind} has written logs to {url}"
        raise fail(f"no logs of {kind} {daemon_id!r}{hint}", 1)
    logs = daemon_logs.daemon_log_store(url, kind)
    with LogPrinter(sys.stdout, prefix=False) as printer:
        follower = LogFollower(logs, daemon_id, printer, [0], since=since_time, tail=tail)
        follower.poll(1, final=not follow)
        while follow:
            time.sleep(FOLLOW_POLL_SECONDS)
            follower.poll(1)


@logs_app.command("controller")
def logs_controller(
    controller_id: Annotated[
        str | None, typer.Argument(help="its id (its host's name); default: the only one, else they are listed")
    ] = None,
    since: SinceOpt = None, tail: TailOpt = None, follow: FollowOpt = False,
    temporal: TemporalOpt = None, store: StoreOpt = None,
) -> None:
    """A controller's own structured log (JSON lines), from the store."""
    _print_daemon_log("controller", controller_id, since, tail, follow, temporal, store)


@logs_app.command("worker")
def logs_worker(
    worker_id: Annotated[
        str | None, typer.Argument(help="the worker's id; default: the only one, else they are listed")
    ] = None,
    since: SinceOpt = None, tail: TailOpt = None, follow: FollowOpt = False,
    temporal: TemporalOpt = None, store: StoreOpt = None,
) -> None:
    """A worker agent's own structured log (JSON lines), from the store."""
    _print_daemon_log("worker", worker_id, since, tail, follow, temporal, store)


def job_bug_report(
    job_id: str,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="the file to write (default: bug-report-JOB.md; - for stdout)")
    ] = None,
    temporal: TemporalOpt = None,
    store: StoreOpt = None,
) -> None:
    """One Markdown file with the job's request, status, errors, log tails, workers and workflow histories."""
    from pathlib import Path

    client = iris_client(temporal, store)
    if getattr(client._async, "remote", False):  # team mode: the controller writes it (iris/auth/api.py)
        text: str = client._run(client._async.bug_report(job_id))  # type: ignore[attr-defined]
    else:  # reads Temporal's histories itself: the SDK is loaded only here
        from iris.client.bug_report import report

        text = client._run(report(client._async, job_id))
    if output == "-":
        sys.stdout.write(text)
        return
    path = Path(output or f"bug-report-{re.sub(r'[^A-Za-z0-9._-]+', '_', job_id)}.md")
    path.write_text(text, encoding="utf-8")
    err.print(f"wrote {path} ({len(text.encode()):,} bytes): review it, then attach it to the issue",
              markup=False, highlight=False)


# -- iris autoscaler status ----------------------------------------------------------------------------

autoscaler_app = typer.Typer(help="The autoscaler.", no_args_is_help=True)


@autoscaler_app.command("status")
def autoscaler_status(
    as_json: Annotated[bool, typer.Option("--json", help="the autoscaler's published status as JSON")] = False,
    temporal: TemporalOpt = None, store: StoreOpt = None,
) -> None:
    """Per scale group: slices by state, demand, what it does now and why, and its last decision."""
    import dataclasses
    import json

    from iris.client.views.autoscaler_view import explain_group

    client = iris_client(temporal, store)
    status = client._run(client._async.autoscaler_status())
    if as_json:
        out.print(json.dumps(dataclasses.asdict(status) if status else None, indent=2), markup=False, highlight=False)
        return
    if status is None or not status.groups:
        out.print("no scale groups (the controller was started without any)", markup=False, highlight=False)
        return
    now = time.time()
    out.print(f"{status.pending_jobs} jobs waiting for a place", markup=False, highlight=False)
    for g in status.groups:
        out.print(f"{g.name} ({g.platform}, {g.min_slices}..{g.max_slices} slices)", markup=False, highlight=False)
        for line in explain_group(g, status.unmet, now):
            out.print(f"  {line}", markup=False, highlight=False)
    for job_id, why in sorted(status.unmet.items()):
        out.print(f"job {job_id}: no group takes it now: {why}", markup=False, highlight=False)
