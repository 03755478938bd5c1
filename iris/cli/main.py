"""The `iris` command line: a thin layer over IrisClient, the controller and the worker agent."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from activities.contracts import SCHEDULER_WORKFLOW_ID
from iris.cli import run_options as ro
from iris.cli.common import (
    NO_LOCAL_CLUSTER,
    StoreOpt,
    TemporalOpt,
    close_clients,
    err,
    fail,
    iris_client,
    out,
    temporal_settings,
)
from iris.cli.error_lines import CliError, exit_now, run_cli
from iris.cli.job_control_commands import job_control_lines
from iris.cli.logging_config import configure_logging_on_import
from iris.cli.parsing import parse_since
from iris.cli.port_commands import job_endpoints
from iris.cli.run_options import as_flags, job_options
from iris.types import JobState, JobStatus, TaskState, TaskStatus
from iris.units import format_memory
from scheduler.teams import DEFAULT_TEAM

app = typer.Typer(
    help="Iris: durable multi-host accelerator jobs on Temporal.", no_args_is_help=True,
    pretty_exceptions_enable=False,  # errors are one line, printed by iris.cli.error_lines.run_cli
)
cluster_app = typer.Typer(help="The embedded local cluster.", no_args_is_help=True)
job_app = typer.Typer(help="Jobs.", no_args_is_help=True)
worker_app = typer.Typer(help="Workers.", no_args_is_help=True)
controller_app = typer.Typer(help="The control plane.", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")
app.add_typer(job_app, name="job")
app.add_typer(worker_app, name="worker")
app.add_typer(controller_app, name="controller")
temporal_app = typer.Typer(help="An existing Temporal deployment.", no_args_is_help=True)
app.add_typer(temporal_app, name="temporal")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("iris")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        out.print(f"iris {_version()}", markup=False, highlight=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """Iris: durable multi-host accelerator jobs on Temporal."""


@app.command("version")
def version_command() -> None:
    """Print the version of Iris."""
    out.print(f"iris {_version()}", markup=False, highlight=False)


def _describe(status: JobStatus) -> str:
    counts = ", ".join(f"{k.lower()} {v}" for k, v in sorted(status.task_state_counts.items()))
    line = f"{status.job_id}: {status.state} ({counts})"
    if status.pending_reason:
        line += f" — waiting: {status.pending_reason}"
    return line


# -- iris run -------------------------------------------------------------------------------------


@app.command(context_settings={"allow_interspersed_args": False, "ignore_unknown_options": False})
@ro.takes_job_flags
def run(
    command: ro.CommandArg,
    *,
    name: Annotated[str | None, typer.Option(help="job name")] = None,
    flags: ro.JobFlags,
    if_exists: Annotated[
        str, typer.Option("--if-exists", help="with --name: new (always submit), reuse (the job of that name "
                                               "unless it ended badly) or fail (if one is pending or running)")
    ] = "new",
    no_wait: Annotated[bool, typer.Option("--no-wait", help="print the job id and return")] = False,
    temporal: TemporalOpt = None,
    store: StoreOpt = None,
) -> None:
    """Submit CMD as a job, stream its logs prefixed by task index, exit 0 on success.

    Tasks run on workers, not in this terminal: their stdin is empty (/dev/null), so pass input as
    arguments, environment (-e) or files in the store; their stdout and stderr are the job's logs.
    """
    from iris.client.job_control import parse_if_exists
    if name is not None and not name.strip():
        raise fail("--name: must not be empty")
    try:
        options = job_options(command, name=name, **flags)
        parse_if_exists(if_exists, name)
        typed = [*command, name or ""] + [t for f in ("env", "constraint", "prefer") for t in flags[f] or []]
        for text in typed:
            text.encode("utf-8")  # raw bytes from the shell: say so (run_cli) rather than fail mid-submit
    except UnicodeError:
        raise
    except ValueError as e:
        raise fail(as_flags(str(e))) from None
    client = iris_client(temporal, store, start=True)
    asked_at = time.time()
    try:
        job = client.submit_command(command, if_exists=if_exists, **options)
    except ValueError as e:  # what only the cluster can tell: an unknown --after job, a refused --if-exists fail
        raise fail(as_flags(str(e))) from None
    earlier = if_exists == "reuse" and (job.status().submitted_at or asked_at) < asked_at  # a new one: after
    err.print(f"{'reusing' if earlier else 'submitted'} [bold]{job.job_id}[/bold]")  # reuse: nothing new was started
    if no_wait:
        out.print(job.job_id)
        return
    last = [""]

    def progress(status: JobStatus) -> None:
        line = _describe(status)
        if line != last[0]:
            err.print(f"[dim]{line}[/dim]")
            last[0] = line

    try:
        status = client.wait(job.job_id, timeout=None, stream_logs=True, raise_on_failure=False, on_progress=progress)
    except KeyboardInterrupt:
        err.print(f"interrupted: killing {job.job_id}")
        client.terminate(job.job_id)
        raise typer.Exit(130) from None
    if status.state != JobState.SUCCEEDED:
        err.print(f"[red]{status.job_id} {status.state}[/red]: {status.error or status.pending_reason}")
        failed = [t.exit_code for t in status.tasks if t.exit_code not in (None, 0)]
        raise typer.Exit(failed[0] if failed and 0 < failed[0] < 256 else 1)
    err.print(f"[green]{status.job_id} SUCCEEDED[/green]")


# -- iris job ---------------------------------------------------------------------------------------


@job_app.command("list")
def job_list(
    state: Annotated[str | None, typer.Option("--state", help="only jobs in this state, e.g. RUNNING")] = None,
    user: Annotated[str | None, typer.Option("--user", help="only this user's jobs")] = None,
    name: Annotated[str | None, typer.Option("--name", help="only jobs of this name")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", help="only jobs in this namespace")] = None,
    parent: Annotated[str | None, typer.Option("--parent", help="only the children of this job")] = None,
    tree: Annotated[bool, typer.Option("--tree", help="each child below its parent, indented")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="at most this many jobs")] = 200,
    temporal: TemporalOpt = None,
    store: StoreOpt = None,
) -> None:
    """List jobs, newest first (from Temporal's visibility: no workflow is queried)."""
    from iris.cli.tree_commands import tree_label, tree_order

    table = Table("JOB", "NAME", "STATE", "TASKS", "ERROR / WAITING ON")
    jobs = iris_client(temporal, store).list_jobs(limit, state=state, user=user, name=name, namespace=namespace,
                                                  parent=parent)
    for depth, s in tree_order(jobs) if tree else [(0, j) for j in jobs]:
        counts = " ".join(f"{k.lower()} {v}" for k, v in sorted(s.task_state_counts.items()))
        tasks = f"{s.num_tasks} ({counts})" if counts and s.num_tasks > 1 else str(s.num_tasks)
        table.add_row(tree_label(depth, s), s.name, s.state, tasks, (s.error or s.pending_reason)[:80])
    out.print(table)


LISTED_TASKS = 2_000  # rows `iris job status` lists without --all


def listed_tasks(s: JobStatus, all_tasks: bool) -> tuple[tuple[TaskStatus, ...], str]:
    """The rows `iris job status` lists, and a line saying what it left out: past LISTED_TASKS tasks, only
    those that did not succeed (the first LISTED_TASKS of them), unless `--all`."""
    if all_tasks or len(s.tasks) <= LISTED_TASKS:
        return s.tasks, ""
    shown = tuple(t for t in s.tasks if t.state != TaskState.SUCCEEDED)[:LISTED_TASKS]
    counts = ", ".join(f"{n:,} {state}" for state, n in sorted(s.task_state_counts.items()))
    return shown, f"tasks: {s.num_tasks:,} ({counts}); listed: {len(shown):,} that did not succeed (--all: every task)"


@job_app.command("status")
def job_status(
    job_id: str,
    temporal: TemporalOpt = None,
    store: StoreOpt = None,
    all_tasks: Annotated[
        bool, typer.Option("--all", help=f"list every task (past {LISTED_TASKS:,}: only those that did not succeed)")
    ] = False,
) -> None:
    """Show a job and its tasks (and why it is pending, if it is)."""
    s = iris_client(temporal, store).job_status(job_id)
    out.print(f"job {s.job_id} ({s.name}): [bold]{s.state}[/bold]", markup=True, highlight=False)
    if s.parent_job_id:
        out.print(f"parent: {s.parent_job_id}", markup=False, highlight=False)
    band = s.priority if s.effective_priority == s.priority else f"{s.priority} (scheduled as {s.effective_priority})"
    team = f"  team: {s.team}" if s.team not in ("", DEFAULT_TEAM) else ""  # whatever its state
    out.print(f"user: {s.user or '-'}{team}  band: {band}  preemptions: {s.preemptions}", markup=False,
              highlight=False)  # fmt: skip
    for line in job_control_lines(s):  # dependencies and a throttled array's cap (iris/cli/job_control_commands.py)
        out.print(line, markup=False, highlight=False)
    if s.pending_reason:
        out.print(f"pending: {s.pending_reason}", markup=False, highlight=False)
    if place_line(s):
        out.print(place_line(s), markup=False, highlight=False)
    if s.error:
        out.print(f"error: {s.error}", markup=False, highlight=False)
    table = Table("TASK", "STATE", "WORKER", "ATTEMPT", "FAILURES", "PREEMPTIONS", "EXIT", "ERROR")
    shown, note = listed_tasks(s, all_tasks)
    if note:
        out.print(note, markup=False, highlight=False)
    for t in shown:
        table.add_row(
            str(t.task_index), t.state, t.worker_id, str(t.attempt), str(t.failure_count),
            str(t.preemption_count), "" if t.exit_code is None else str(t.exit_code), t.error[:60],
        )
    out.print(table)


@job_app.command("logs")
def job_logs(
    job_id: str,
    task: Annotated[int | None, typer.Option("--task", help="only this task index")] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="keep printing until the job ends")] = False,
    since: Annotated[
        str | None, typer.Option("--since", help="only lines written since: a DURATION ago (30s, 10m, 1h) or a TIME")
    ] = None,
    tail: Annotated[int | None, typer.Option("--tail", min=0, help="only the last N lines of each task")] = None,
    prefix: Annotated[
        bool | None,
        typer.Option("--prefix/--no-prefix", help="'\\[i] ' before each line (default: only on a terminal)"),
    ] = None,
    children: Annotated[
        bool, typer.Option("--children", help="also every job below this one; lines labelled '\\[JOB/task-i] '")
    ] = False,
    temporal: TemporalOpt = None,
    store: StoreOpt = None,
) -> None:
    """Print task logs: the tasks' bytes unchanged; on a terminal each line gets its task index."""
    from iris.cli.log_output import LogFollower, LogPrinter

    try:
        since_time = parse_since(since) if since is not None else None
    except ValueError as e:
        raise fail(str(e)) from None
    client = iris_client(temporal, store)
    if children:
        from iris.cli.tree_commands import print_tree_logs

        if task is not None:
            raise fail("--task: not with --children (every task of every job is printed)")
        print_tree_logs(client, job_id, sys.stdout, follow=follow, since=since_time, tail=tail)
        return
    status = client.job_status(job_id)
    if task is not None and not 0 <= task < status.num_tasks:
        raise fail(f"--task: job {job_id} has tasks 0..{status.num_tasks - 1}, got {task}")
    indices = [task] if task is not None else list(range(status.num_tasks))
    with LogPrinter(sys.stdout, prefix=prefix) as printer:
        follower = LogFollower(client.log_store, job_id, printer, indices, since=since_time, tail=tail)
        if not follow:
            follower.poll(status.num_tasks, final=True)
            return
        said = [""]

        def progress(st: JobStatus) -> None:
            follower.poll(st.num_tasks, final=st.done)
            line = _describe(st) if st.state == JobState.PENDING else ""  # a long wait shows why (stderr)
            if line and line != said[0]:
                err.print(f"[dim]{line}[/dim]")
            said[0] = line

        final = client.wait(job_id, timeout=None, raise_on_failure=False, on_progress=progress)
        if final.state != JobState.SUCCEEDED:  # how it ended, as `iris run` says it (the logs may say nothing)
            err.print(f"{final.job_id} {final.state}: {final.error or final.pending_reason}", markup=False)


@job_app.command("kill")
def job_kill(job_id: str, temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Kill a job and every unfinished job below it: running tasks are stopped, pending ones dequeued."""
    requested = iris_client(temporal, store).terminate(job_id)
    err.print(f"kill requested for {job_id}" if requested else f"{job_id} had already finished")


# -- iris worker ---------------------------------------------------------------------------------------


@worker_app.command("list")
def worker_list(temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """List registered workers."""
    table = Table("WORKER", "HEALTHY", "CORDONED", "CPU", "MEMORY", "RUNNING", "ATTRIBUTES")
    for w in iris_client(temporal, store).list_workers():
        attrs = " ".join(f"{k}={v}" for k, v in sorted(w.attributes.items()))
        table.add_row(w.worker_id, "yes" if w.healthy else "NO", "yes" if w.cordoned else "-", f"{w.cpu:g}",
                      format_memory(w.memory_bytes), str(len(w.running_tasks)), attrs)  # fmt: skip
    out.print(table)


# -- iris temporal -------------------------------------------------------------------------------------


@temporal_app.command("setup")
def temporal_setup(temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Register the namespace and Iris's search attributes on an existing Temporal (idempotent)."""
    import asyncio  # not at the top, like structlog, which imports it: most commands never run a loop here

    from iris.deploy.temporal_setup import setup

    settings = temporal_settings(temporal)
    if settings.address is None:
        raise fail("temporal setup needs --temporal HOST:PORT (or IRIS_TEMPORAL_ADDRESS)")

    async def main() -> list[Any]:
        return await setup(await settings.connect())

    try:
        steps = asyncio.run(main())
    except RuntimeError as e:
        raise fail(f"cannot reach Temporal at {settings.address}: {str(e).splitlines()[0]}", 1) from None
    for step in steps:
        out.print(str(step), markup=False, highlight=False)
    if any(step.outcome == "failed" for step in steps):
        raise typer.Exit(1)


# -- iris cluster -------------------------------------------------------------------------------------


@cluster_app.command("up")
def cluster_up(config: Annotated[Path | None, typer.Option(help="cluster YAML")] = None) -> None:
    """Start the embedded local cluster in the background, or start whatever part of it is down."""
    from iris.config.cluster_file import load_config
    from iris.local.cluster import LocalCluster
    from iris.security.codec import load_key

    cfg = load_config(config) if config else None
    load_key()  # a malformed IRIS_CODEC_KEY is one line now, not a cluster that never becomes ready
    err.print("starting the local cluster…")
    info = LocalCluster().up(cfg, supervise=True)
    if info.config_refused:  # the running cluster is left as it is: not what the caller asked for
        raise fail(f"{config}: {info.config_refused}", 1)
    if info.restarted:
        err.print(f"restarted: {', '.join(info.restarted)}")
    elif info.already_running:
        err.print("already running")
    if info.auth != "none":  # team mode: users reach only the Iris API; the admin's token is in IRIS_HOME
        from iris.auth.bootstrap import ADMIN_TOKEN_FILE

        out.print(f"Auth: {info.auth}\nIris API: {info.dashboard_url}\nDashboard: {info.dashboard_url}\n"
                  f"admin token: {LocalCluster().home / ADMIN_TOKEN_FILE}\nworkers: {len(info.worker_ids)}",
                  markup=False, highlight=False)  # fmt: skip
        return
    out.print(f"Temporal: {info.address}\nUI: {info.ui_url}", markup=False, highlight=False)
    if info.dashboard_url:
        out.print(f"Dashboard: {info.dashboard_url}", markup=False, highlight=False)
    out.print(f"workers: {len(info.worker_ids)}")


@cluster_app.command("down")
def cluster_down() -> None:
    """Stop the local cluster; its state on disk survives."""
    from iris.local.cluster import LocalCluster

    LocalCluster().down()
    err.print("local cluster stopped")


STATUS_QUERY_SECONDS = 1.5
"""How long `iris cluster status` waits for the controller: it must answer within 2 s, controller or not."""


@cluster_app.command("status")
def cluster_status(temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Temporal address, UI URL, store URL, workers and queue depth; names each local component that is down."""
    from iris.local.cluster import TEMPORAL, LocalCluster

    local = LocalCluster()
    info = None if temporal is not None else local.status()
    if temporal is None and info is None:
        raise CliError(NO_LOCAL_CLUSTER)
    if info is not None and info.auth != "none":  # team mode: only the addresses behind Iris's checks
        from iris.cli.team_mode_status import print_team_status

        print_team_status(info, local.down_components(info))
        return
    out.print("Auth: none (one user, no login)", markup=False, highlight=False)
    address = temporal or (info.address if info is not None else "")
    down = local.down_components(info) if info is not None else []
    out.print(f"Temporal: {address}" + (" (down)" if TEMPORAL in down else ""), markup=False, highlight=False)
    if info is not None:
        out.print(f"UI: {info.ui_url}", markup=False, highlight=False)
        if info.dashboard_url:
            out.print(f"Dashboard: {info.dashboard_url}", markup=False, highlight=False)
        for name in down:
            pid = info.pids.get(name)
            out.print(f"down: {name} (pid {pid} exited)", markup=False, highlight=False)
    if TEMPORAL in down:
        out.print(f"Store: {info.store_url if info else ''}", markup=False, highlight=False)
        raise CliError("the local cluster's Temporal server is down; `iris cluster up` starts it again", 1)
    try:
        client = iris_client(address, info.store_url if info is not None else None)
    except Exception:  # it asks the scheduler for the store: a stuck scheduler is named here too
        failing = _scheduler_failure_at(address)
        if failing:
            raise CliError(failing, 1) from None
        raise
    try:
        summary = client._run(client._async.summary(budget=STATUS_QUERY_SECONDS))
    except Exception as e:  # the controller is down, starting or stalled: say so, at once
        out.print(f"Store: {client.store_url}", markup=False, highlight=False)
        failing = _scheduler_failure(client)
        if failing:  # it will not answer until someone acts: not a wait-and-see
            raise CliError(failing, 1) from None
        out.print(f"workers: unknown (the controller does not answer: {type(e).__name__})",
                  markup=False, highlight=False)  # fmt: skip
        return
    out.print(f"Store: {summary.store_url or client.store_url}", markup=False, highlight=False)
    workers = client.list_workers() if summary.total_workers else []
    names = sorted(w.worker_id for w in workers if not w.healthy)  # an agent frozen or gone is not "down" above
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    unhealthy = f" (unhealthy: {', '.join(names[:5])}{more})" if names else ""
    cordoned = sum(1 for w in workers if w.healthy and w.cordoned)  # they take no new work
    unhealthy += f", {cordoned} cordoned" if cordoned else ""
    out.print(
        f"workers: {summary.healthy_workers} healthy of {summary.total_workers}{unhealthy}\n"
        f"queue: {summary.pending_tasks} pending tasks, {summary.running_tasks} placed",
        markup=False, highlight=False,
    )  # fmt: skip
    from iris.cli.fleet_commands import print_fleet_status

    print_fleet_status(client)


def _scheduler_failure_at(address: str) -> str | None:
    """As `_scheduler_failure`, with a plain connection to `address` (no client could be made)."""
    import asyncio

    from iris.controller.workflow_health import failing_line, workflow_task_failure
    from iris.local.readiness import readiness_client

    async def ask() -> str | None:
        client = await readiness_client(address, temporal_settings(address).namespace)
        failure = await workflow_task_failure(client, SCHEDULER_WORKFLOW_ID)
        return failing_line("scheduler", failure) if failure else None

    try:
        return asyncio.run(asyncio.wait_for(ask(), 10.0))
    except Exception:
        return None


def _scheduler_failure(client: Any) -> str | None:
    """The scheduler's failing workflow task as one line, or None (also when Temporal cannot say)."""
    try:
        return client._run(client._async.scheduler_failure())
    except Exception:
        return None


@app.command("dashboard")
def dashboard() -> None:
    """Print the URL of the web dashboard of the local cluster (its controller serves it)."""
    from iris.local.cluster import LocalCluster

    info = LocalCluster().status()
    if info is None or not info.running:
        raise CliError(NO_LOCAL_CLUSTER)
    if not info.dashboard_url:
        raise CliError("the local cluster runs without a dashboard: `iris cluster down`, then `iris cluster up`")
    out.print(info.dashboard_url, markup=False, highlight=False)


def main() -> None:
    configure_logging_on_import(json=False)  # `serve` commands switch to JSON
    code = run_cli(app, prog_name="iris", before_exit=close_clients)
    exit_now(code)


# The daemons, the image and key commands, and the fleet commands live in their own modules.
from iris.cli.daemon_commands import controller_serve, worker_serve  # noqa: E402
from iris.cli.image_commands import build_app, codec_key, codec_server  # noqa: E402

app.command("codec-server")(codec_server)
app.command("codec-key")(codec_key)
app.add_typer(build_app, name="build")
worker_app.command("serve")(worker_serve)
controller_app.command("serve")(controller_serve)
from iris.cli.fleet_commands import slice_app, worker_cordon, worker_drain  # noqa: E402

app.add_typer(slice_app, name="slice")
worker_app.command("cordon")(worker_cordon)
worker_app.command("drain")(worker_drain)
from iris.cli.ops_commands import autoscaler_app, job_bug_report, logs_app  # noqa: E402

app.add_typer(logs_app, name="logs")
app.add_typer(autoscaler_app, name="autoscaler")
job_app.command("bug-report")(job_bug_report)
from iris.cli.task_commands import job_summary, task_app  # noqa: E402

app.add_typer(task_app, name="task")
job_app.command("summary")(job_summary)
job_app.command("endpoints")(job_endpoints)
from iris.cli.reservation_commands import reservation_app  # noqa: E402

app.add_typer(reservation_app, name="reservation")
from iris.cli.user_commands import user_app  # noqa: E402

app.add_typer(user_app, name="user")
from iris.cli.job_control_commands import schedule_app  # noqa: E402

app.add_typer(schedule_app, name="schedule")
from iris.cli.auth_commands import auth_app  # noqa: E402

app.add_typer(auth_app, name="auth")
from iris.cli.team_commands import place_line, queue_list, team_app  # noqa: E402

app.add_typer(team_app, name="team")
app.command("queue")(queue_list)

if __name__ == "__main__":
    main()
