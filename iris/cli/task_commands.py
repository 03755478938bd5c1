"""Looking at a job's tasks: `iris job summary JOB` (per-task usage), `iris task exec`, `iris task profile`."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from iris.cli.common import StoreOpt, TemporalOpt, err, fail, iris_client, out
from iris.types import TaskStatus
from iris.units import format_memory

task_app = typer.Typer(help="Look inside a job's running tasks.", no_args_is_help=True)


def _duration(seconds: float) -> str:
    if seconds <= 0:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def summary_row(t: TaskStatus, live: tuple[int, float, float] | None = None) -> list[str]:
    """One task's line of `iris job summary`: the ended attempt's usage, or a running one's so far (marked `+`)."""
    attempts = t.attempt + 1 if t.worker_id or t.exit_code is not None else t.attempt  # attempt counts from 0
    peak, cpu, run, mark = t.peak_memory_bytes, t.cpu_seconds, t.duration_seconds, ""
    if live is not None and t.state == "RUNNING":
        (peak, cpu, run), mark = live, "+"
    return [
        str(t.task_index), str(t.state), t.worker_id or "-", str(attempts),
        "-" if t.exit_code is None else str(t.exit_code), _duration(run) + (mark if run > 0 else ""),
        format_memory(peak) + mark if peak else "-",
        f"{cpu:.2f}{mark}" if cpu or run else "-",
    ]  # fmt: skip


def job_summary(job_id: str, temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Per task: state, attempts, worker, exit code, duration, peak memory and CPU seconds of its latest attempt."""
    from iris.client.views.live_usage import live_usage

    client = iris_client(temporal, store)
    s = client.job_status(job_id)
    out.print(f"job {s.job_id} ({s.name}): {s.state}", markup=False, highlight=False)
    running = [t.task_index for t in s.tasks if t.state == "RUNNING"]
    remote = getattr(client._async, "remote", False)  # team mode: no heartbeats to read, the ended figures only
    live = client._run(live_usage(client._async.temporal, job_id, running)) if running and not remote else {}
    table = Table("TASK", "STATE", "WORKER", "ATTEMPTS", "EXIT", "DURATION", "PEAK MEMORY", "CPU SECONDS")
    for t in s.tasks:
        table.add_row(*summary_row(t, live.get(t.task_index)))
    out.print(table)
    if live:
        out.print("+ so far: the task is still running", markup=False, highlight=False)
    ended = [t for t in s.tasks if t.duration_seconds]
    if ended:
        peak = max(t.peak_memory_bytes for t in ended)
        cpu = sum(t.cpu_seconds for t in ended)
        out.print(f"{len(ended)} task(s) ended: peak memory {format_memory(peak)} (largest), "
                  f"{cpu:.2f} CPU seconds (total)", markup=False, highlight=False)  # fmt: skip


TaskOpt = Annotated[int, typer.Option("--task", min=0, help="the task index (default 0)")]


def _write_out(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


@task_app.command(
    "exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)  # fmt: skip
def task_exec(
    job_id: str,
    command: Annotated[list[str], typer.Argument(help="the command and its arguments, after --")],
    task: TaskOpt = 0,
    temporal: TemporalOpt = None,
    store: StoreOpt = None,
) -> None:
    """Run a command inside a running task's environment (its container on docker/containerd workers).

    Output is streamed; the exit code is the command's: `iris task exec JOB --task 3 -- nvidia-smi`.
    """
    import signal

    from iris.client.task_exec import TaskAccessError, exec_in_task

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # `kill` as Ctrl-C: the remote command is killed too, never left running

    signal.signal(signal.SIGTERM, interrupted)
    try:
        outcome = exec_in_task(iris_client(temporal, store), job_id, task, command, _write_out)
    except TaskAccessError as e:
        raise fail(str(e), 1) from None
    if outcome.error:
        raise fail(outcome.error, 1)
    code = outcome.exit_code
    if code < 0:  # killed by signal N: the shell's (and docker exec's) 128+N, e.g. 137 for SIGKILL
        code = 128 - code
    raise typer.Exit(code if 0 <= code < 256 else 1)


@task_app.command("profile")
def task_profile(
    job_id: str,
    task: TaskOpt = 0,
    duration: Annotated[float, typer.Option("--duration", help="seconds to sample")] = 10.0,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="SVG file (default <job>-task<I>.svg)")] = None,
    temporal: TemporalOpt = None,
    store: StoreOpt = None,
) -> None:
    """A CPU profile of a running task's Python process (py-spy), written as a flame graph (SVG)."""
    from iris.client.task_exec import TaskAccessError, profile_task

    if not duration > 0:  # before anything connects or samples: a usage error, as --duration abc is
        raise fail(f"--duration must be a positive number of seconds, got {duration:g}")
    path = output or Path(f"{job_id.replace('/', '_')}-task{task}.svg")
    if not path.absolute().parent.is_dir():  # said now, not after sampling for --duration seconds
        raise fail(f"--output: no such directory: {path.absolute().parent}")
    client = iris_client(temporal, store)
    # The progress line once the profile is under way (a second after connecting): a refusal or an error comes
    # sooner and stays the one line on stderr that it is everywhere else. (Counted from the command's start, a
    # refusal on a loaded machine once came after the line: the command's own start and connection took the second.)
    progress = threading.Timer(1.0, err.print, (f"profiling task {task} of {job_id} for {duration:g} s",),
                               {"markup": False, "highlight": False})  # fmt: skip
    progress.daemon = True
    progress.start()
    try:
        outcome, svg = profile_task(client, job_id, task, duration, lambda data: sys.stderr.buffer.write(data))
    except TaskAccessError as e:
        raise fail(str(e), 1) from None
    finally:
        progress.cancel()
    if outcome.error:
        raise fail(outcome.error, 1)
    path.write_bytes(svg)
    out.print(f"wrote {path}", markup=False, highlight=False)
