"""Mending and stopping the local cluster from its record.

`heal` starts whatever recorded process is down with its recorded command line (the dev server
first, on its ports and database); only when another program now holds the dev server's port
does it move to new ones, and then everything else is restarted with the new address (but the supervisor,
which reads it from the record). `stop`
stops the recorded processes tier by tier, and every local worker of the cluster's home found
in the process table, through the local platform's `stop_processes`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from activities.platforms.local import recorded_slice_hosts
from activities.platforms.local_process import (
    STOP_GRACE_SECONDS,
    LocalProcess,
    find_workers,
    kill_processes,
    stop_processes,
    worker_process_name,
)
from iris.local import commands
from iris.local.processes import crash_excerpt, log_since
from iris.local.readiness import run_sync, wait_for_temporal
from iris.local.record import CONTROLLER, SUPERVISOR, TEMPORAL, ClusterRecord, down_components
from worker_agent.runtimes.process import ProcessGroupLedger

log = structlog.get_logger("iris.local.cluster")

PORT_ATTEMPTS = 3


def heal(
    record: ClusterRecord,
    state: dict[str, Any],
    temporal_timeout: float,
    names: Sequence[str] | None = None,
    down: Sequence[str] | None = None,
) -> list[str]:
    """Start the recorded processes of `state` that are down (of `names`), dev server first; those started.

    `down`, when given, names what is known to be down (a stopped cluster: all of it).
    """
    if down is None:
        down = [n for n in down_components(record.info(state)) if names is None or n in names]
    restarted: list[str] = []
    if TEMPORAL in down:
        if TEMPORAL in state["pids"] and record.process(state, TEMPORAL).alive():
            # Alive but not answering on its port (hung, or still starting): replace it.
            stop_processes(record.processes(state, [TEMPORAL]), 5.0)
        moved = respawn(record, state, TEMPORAL, temporal_timeout)
        restarted.append(TEMPORAL)
        if moved:  # on new ports: everything else must be told the new address, by a restart
            # but the supervisor, which reads the address from the record (and is the one healing, most often: it
            # waited out its own stop's grace, then killed itself, and the cluster stayed down)
            others = {n: p for n, p in record.processes(state).items() if n not in (TEMPORAL, SUPERVISOR)}
            stop_processes(others, STOP_GRACE_SECONDS)
            down = [TEMPORAL, *others]
    order = sorted((n for n in down if n != TEMPORAL), key=lambda n: (n == SUPERVISOR, n != CONTROLLER, n))
    for name in order:
        if name in state["argv"]:
            respawn(record, state, name, temporal_timeout)
            restarted.append(name)
    return restarted


def respawn(record: ClusterRecord, state: dict[str, Any], name: str, timeout: float) -> bool:
    """Start recorded process `name` with its recorded command line; whether the dev server had to move."""
    argv = list(state["argv"][name])
    if name != TEMPORAL:
        record.spawn(state, name, argv)
        return False
    log_file = record.log_path(TEMPORAL)
    for attempt in range(PORT_ATTEMPTS):
        offset = log_file.stat().st_size if log_file.exists() else 0
        record.spawn(state, TEMPORAL, argv)
        try:
            await_temporal(record, state, timeout)
            return attempt > 0
        except RuntimeError as e:
            output = log_since(log_file, offset, limit=None)
            if "address already in use" not in output or attempt + 1 == PORT_ATTEMPTS:
                raise RuntimeError(f"{e}\n--- end of {log_file} ---\n{crash_excerpt(output)}") from None
            argv = move_temporal(state, argv)
    raise AssertionError("unreachable")


def await_temporal(record: ClusterRecord, state: Mapping[str, Any], timeout: float) -> None:
    """Wait until the recorded dev server answers; RuntimeError if it exits or stays silent."""
    server = record.process(state, TEMPORAL)

    def exited() -> str | None:
        return None if server.alive() else "the server process exited"

    run_sync(wait_for_temporal(state["address"], timeout, abort_if=exited, log_file=record.log_path(TEMPORAL)))


def move_temporal(state: dict[str, Any], argv: list[str]) -> list[str]:
    """New free ports for the dev server, written into its command line, the state and every other command."""
    old = state["address"]
    port = commands.free_port()
    ui_port = commands.free_port(avoid=port)
    argv[argv.index("--port") + 1], argv[argv.index("--ui-port") + 1] = str(port), str(ui_port)
    host = commands.HOST
    address = f"{host}:{port}"
    log.warning("local_cluster.port_taken", old_address=old, new_address=address)
    old_ui = state.get("ui_url", "")
    path = argv[argv.index("--ui-public-path") + 1] if "--ui-public-path" in argv else ""
    ui_url = f"http://{host}:{ui_port}{path}"
    state.update(address=address, ui_url=ui_url, temporal_port=port, ui_port=ui_port)
    moved = {old: address, old_ui: ui_url}
    for name, other in state["argv"].items():
        if name != TEMPORAL:  # the controller's --temporal and --temporal-ui, the workers' --temporal
            state["argv"][name] = [moved.get(a, a) for a in other]
    return argv


def stop(record: ClusterRecord) -> None:
    """Stop recorded processes tier by tier (supervisor, workers, controller, Temporal) and forget their pids.

    Their command lines stay recorded, so the next `up` brings the same cluster back. The dev server goes last
    and is killed, not asked to stop: its graceful stop waits out a fixed one-second request drain and a
    membership wait (~1.5 s) for clients that are gone by then, and everything it acknowledged is already in
    its database (SQLite's write-ahead log, folded back into temporal.db here, as a clean close would).
    """
    state = record.read()
    if state is None or not state["pids"]:
        return
    recorded = record.processes(state)
    workers = _local_workers(record.home)
    workers.update({n: p for n, p in recorded.items() if n not in (CONTROLLER, TEMPORAL, SUPERVISOR)})
    tiers = [
        {n: p for n, p in recorded.items() if n == SUPERVISOR},  # first: it would start the others again
        workers,
        {n: p for n, p in recorded.items() if n == CONTROLLER},
    ]
    for index, tier in enumerate(tiers):
        stop_processes(tier, STOP_GRACE_SECONDS)
        if index == 1:  # the agents are gone: so must be any task one of them could not stop in time
            kill_task_leftovers(record.home)
        if index == 2:  # the controller is gone: no slice host can start now, so none started meanwhile stays
            late = _local_workers(record.home)
            if late:
                log.warning("local_cluster.stopping_late_slice_hosts", workers=sorted(late))
                stop_processes(late, STOP_GRACE_SECONDS)
                kill_task_leftovers(record.home)
    temporal = {n: p for n, p in recorded.items() if n == TEMPORAL}
    if temporal:
        kill_processes(temporal)
        fold_write_ahead_log(record.home / "temporal.db")
    state["pids"], state["start_ticks"] = {}, {}
    record.write(state)
    log.info("local_cluster.down", home=str(record.home))


def fold_write_ahead_log(db: Path) -> None:
    """Checkpoint a stopped dev server's SQLite write-ahead log into its database file and empty the log, so
    that temporal.db alone holds the cluster's state (copied or moved, it is whole)."""
    if not db.with_name(db.name + "-wal").exists():
        return
    try:
        with contextlib.closing(sqlite3.connect(db)) as connection:
            busy, _, _ = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            log.warning("local_cluster.wal_not_folded", db=str(db), error="the database is busy")
    except sqlite3.Error as e:  # the next `up` replays the log itself: nothing is lost, the file is not whole
        log.warning("local_cluster.wal_not_folded", db=str(db), error=str(e))


def _local_workers(home: Path) -> dict[str, LocalProcess]:
    """The autoscaler's slice hosts of this home, by process name. They are not in the cluster's record: the
    local platform finds them by their markers in the process table, and by the pids its slice records keep
    (a host in the middle of its exec shows no markers for a moment)."""
    found = {worker_id: f.process for worker_id, f in find_workers(home).items()}
    for worker_id, process in recorded_slice_hosts(home).items():
        found.setdefault(worker_id, process)
    return {worker_process_name(worker_id): process for worker_id, process in found.items()}


def kill_task_leftovers(home: Path) -> None:
    """SIGKILL the task process groups the stopped agents still had recorded (one killed past its grace)."""
    for ledger in sorted((home / "agents").glob("*/running")):  # tasks run in sessions of their own
        killed = ProcessGroupLedger(ledger).kill_leftovers()
        if killed:
            log.warning("local_cluster.killed_leftover_tasks", agent=ledger.parent.name, groups=killed)
