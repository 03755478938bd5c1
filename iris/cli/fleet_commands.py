"""`iris slice list|terminate`, `iris worker cordon|drain`, and the fleet part of `iris cluster status`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from iris.cli.common import StoreOpt, TemporalOpt, err, fail, iris_client, out
from iris.types import WorkerStatus

if TYPE_CHECKING:
    from iris.client.iris_client import IrisClient

slice_app = typer.Typer(help="Slices of the autoscaled scale groups.", no_args_is_help=True)


def _age(since: float) -> str:
    seconds = max(0, int(time.time() - since))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


@slice_app.command("list")
def slice_list(
    all_slices: Annotated[bool, typer.Option("--all", help="also slices that have ended")] = False,
    temporal: TemporalOpt = None, store: StoreOpt = None,
) -> None:
    """List slices: group, state, age, workers, and the error of a failed one."""
    table = Table("SLICE", "GROUP", "STATE", "AGE", "WORKERS", "ERROR")
    for s in iris_client(temporal, store).list_slices(include_ended=all_slices):
        table.add_row(s.slice_id, s.scale_group, s.state, _age(s.created_at), " ".join(s.worker_ids), s.error[:80])
    out.print(table)


@slice_app.command("terminate")
def slice_terminate(
    slice_id: str,
    drain: Annotated[float, typer.Option(help="seconds running tasks may take to finish first")] = 0.0,
    temporal: TemporalOpt = None, store: StoreOpt = None,
) -> None:
    """Scale a slice down now: cordon, (drain,) terminate; its running tasks are retried elsewhere."""
    try:
        requested = iris_client(temporal, store).terminate_slice(slice_id, drain)
    except KeyError as e:
        raise fail(str(e.args[0]), 1) from None
    err.print(f"terminating {slice_id}" if requested else f"{slice_id} had already ended")


def worker_cordon(
    worker_id: str,
    undo: Annotated[bool, typer.Option("--undo", help="accept new work again")] = False,
    temporal: TemporalOpt = None, store: StoreOpt = None,
) -> None:
    """Place no new work on WORKER; what runs there goes on."""
    try:
        iris_client(temporal, store).cordon_worker(worker_id, cordoned=not undo)
    except KeyError as e:
        raise fail(str(e.args[0]), 1) from None
    err.print(f"{worker_id} {'uncordoned' if undo else 'cordoned'}")


def worker_drain(
    worker_id: str,
    timeout: Annotated[float | None, typer.Option(help="give up after this many seconds")] = None,
    temporal: TemporalOpt = None, store: StoreOpt = None,
) -> None:
    """Cordon WORKER and wait until its running tasks have finished (Slurm's drain)."""
    if timeout is not None and not timeout >= 0:  # checked before the worker is cordoned (NaN too)
        raise fail(f"--timeout must be a number of seconds >= 0, got {timeout}")
    last = [-1]

    def progress(worker: WorkerStatus) -> None:
        if len(worker.running_tasks) != last[0]:
            last[0] = len(worker.running_tasks)
            err.print(f"[dim]{worker_id}: waiting for {last[0]} running tasks: {' '.join(worker.running_tasks)}[/dim]")

    try:
        iris_client(temporal, store).drain_worker(worker_id, timeout, on_progress=progress)
    except KeyError as e:
        raise fail(str(e.args[0]), 1) from None
    except TimeoutError as e:
        raise fail(str(e), 1) from None
    err.print(f"{worker_id} drained: cordoned, no task running")


def print_fleet_status(client: IrisClient) -> None:
    """Each scale group's slices by state, and why a group is not scaling up or backs off."""
    from temporalio.service import RPCError

    from iris.client.views import fleet_view

    try:
        status = client._run(fleet_view.autoscaler_status(client._async.temporal))
    except RPCError as e:
        out.print(f"scale groups: no answer from the controller ({e.message})")
        return
    if status is None or not status.groups:
        return
    out.print("scale groups:")
    for g in status.groups:
        slices = ", ".join(f"{len(ids)} {state.lower()}" for state, ids in sorted(g.slices.items())) or "no slices"
        out.print(f"  {g.name} ({g.platform}, {g.min_slices}..{g.max_slices} slices): {slices}")
        for state, ids in sorted(g.slices.items()):
            out.print(f"    {state}: {' '.join(ids)}")
        if g.backoff_reason:
            out.print(f"    backing off for {g.backoff_seconds:g}s: {g.backoff_reason}")
        elif g.reason:
            out.print(f"    not scaling up: {g.reason}")
    for job_id, why in status.unmet.items():
        out.print(f"  job {job_id}: no group will take it: {why}")
