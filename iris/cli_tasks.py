"""Looking at a job's tasks: `iris job summary JOB` (per-task usage), `iris task exec`, `iris task profile`."""

from __future__ import annotations

import typer
from rich.table import Table

from iris.cli_common import StoreOpt, TemporalOpt, iris_client, out
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


def summary_row(t: TaskStatus) -> list[str]:
    """One task's line of `iris job summary`: usage is "-" until the latest attempt has ended."""
    attempts = t.attempt + 1 if t.worker_id or t.exit_code is not None else t.attempt  # attempt counts from 0
    return [
        str(t.task_index), str(t.state), t.worker_id or "-", str(attempts),
        "-" if t.exit_code is None else str(t.exit_code), _duration(t.duration_seconds),
        format_memory(t.peak_memory_bytes) if t.peak_memory_bytes else "-",
        f"{t.cpu_seconds:.2f}" if t.cpu_seconds or t.duration_seconds else "-",
    ]  # fmt: skip


def job_summary(job_id: str, temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Per task: state, attempts, worker, exit code, duration, peak memory and CPU seconds of its latest attempt."""
    s = iris_client(temporal, store).job_status(job_id)
    out.print(f"job {s.job_id} ({s.name}): {s.state}", markup=False, highlight=False)
    table = Table("TASK", "STATE", "WORKER", "ATTEMPTS", "EXIT", "DURATION", "PEAK MEMORY", "CPU SECONDS")
    for t in s.tasks:
        table.add_row(*summary_row(t))
    out.print(table)
    ended = [t for t in s.tasks if t.duration_seconds]
    if ended:
        peak = max(t.peak_memory_bytes for t in ended)
        cpu = sum(t.cpu_seconds for t in ended)
        out.print(f"{len(ended)} task(s) ended: peak memory {format_memory(peak)} (largest), "
                  f"{cpu:.2f} CPU seconds (total)", markup=False, highlight=False)  # fmt: skip
