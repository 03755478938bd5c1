"""The lease watchdog: kills a task's process group once its agent has stopped renewing the attempt's lease.

Why a process of its own: a frozen agent (SIGSTOP, a hung kernel thread, a host swapping itself to
death) cannot kill anything, and its task processes run on in their own sessions while the
scheduler starts the attempt elsewhere. This process is not the agent, lives in a session of its
own (a signal to the agent's process group does not reach it) and so cannot be frozen with it; it
enforces what the agent last wrote and nothing else.

The contract with the agent (``worker_agent.runtimes.process.ProcessGroupLedger`` writes it):
one file per running task in the ledger directory, named by the task's process-group id, whose
lines are an unused one (empty), the lease's deadline on this host's
``CLOCK_BOOTTIME`` (``lease_clock()``; 0 or absent: no lease) and the leader's start time in clock
ticks since boot (``/proc/PID/stat``, so a reused pid is never signalled). The agent replaces the
file (write, then rename) each time Temporal has recorded a heartbeat of the attempt. When this
host's clock passes a deadline, the group is SIGKILLed and ``<pgid>.fenced`` is created beside the
entry, so the agent can say why the task died.

The clock is ``CLOCK_BOOTTIME``: one kernel clock for every process on the host (containers
included), never set back, and still counting while the host is suspended (``CLOCK_MONOTONIC``
stops then, and a resumed host would think its leases fresh).

Standard library only (``activities.process_start`` is too), started as ``python -m
worker_agent.leases.lease_watchdog DIR TICK`` with stdin a pipe the agent holds open: end of file means the
agent is gone, and the watchdog then enforces the leases of the groups that agent left until none of
them is alive, and exits (a later agent with the same ledger has a watchdog of its own).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Container, Mapping
from pathlib import Path
from typing import Final, NamedTuple

from activities.process_start import start_ticks

__all__ = ["FENCED_SUFFIX", "Lease", "expire", "lease_clock", "main", "next_look", "read_lease"]

FENCED_SUFFIX: Final = ".fenced"
PAST_DEADLINE: Final = 0.01  # a look this long after a deadline finds it passed (`now <= deadline` holds it)


def lease_clock() -> float:
    """Seconds on this host's CLOCK_BOOTTIME: the one clock leases are written and enforced in."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class Lease(NamedTuple):
    """One ledger entry as the watchdog reads it."""

    pgid: int
    deadline: float  # on lease_clock(); 0: the task holds no lease
    ticks: int | None  # the leader's start in ticks since boot, when it was recorded


def read_lease(path: Path) -> Lease | None:
    """The entry at `path`, or None if it is not a ledger entry (or was replaced while being read)."""
    if not path.name.isdigit():
        return None
    try:
        lines = path.read_text().split("\n")
    except OSError:
        return None
    try:
        deadline = float(lines[1]) if len(lines) > 1 and lines[1].strip() else 0.0
        ticks = int(lines[2]) if len(lines) > 2 and lines[2].strip() else None
    except ValueError:
        return None
    return Lease(int(path.name), deadline, ticks)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def expire(directory: Path, now: float, only: Container[int] | None = None) -> tuple[list[int], dict[int, float]]:
    """SIGKILL every leased group in `directory` (of `only`, if given) whose deadline is before `now`.

    Returns the groups fenced for the first time and the leased groups that hold a lease still, each with
    its deadline. A group whose leader was replaced by an unrelated process with the same number is left alone.
    """
    killed: list[int] = []
    alive: dict[int, float] = {}
    try:
        entries = list(directory.iterdir())
    except OSError:
        return killed, alive
    for path in entries:
        lease = read_lease(path)
        if lease is None or lease.deadline <= 0 or (only is not None and lease.pgid not in only):
            continue
        if lease.ticks is not None:
            ticks = start_ticks(lease.pgid)
            # A live process with this number that started at another time is not the task's leader.
            if ticks is not None and ticks != lease.ticks:
                continue
        if not _group_alive(lease.pgid):
            continue
        if now <= lease.deadline:
            alive[lease.pgid] = lease.deadline
            continue
        # Marked before the kill: whoever reaps the group's exit (the agent's wait, at once) must find why
        # it died; marked after, a CI run saw the exit first and reported a plain SIGKILL.
        marker = path.with_name(path.name + FENCED_SUFFIX)
        first = not marker.exists()
        if first:
            with contextlib.suppress(OSError):
                marker.touch()
            killed.append(lease.pgid)
        # Again on every tick while anything of it is left (a leader its frozen agent has not reaped
        # stays a zombie); reported once.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(lease.pgid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):  # a container's init, led group or not
            os.kill(lease.pgid, signal.SIGKILL)
    return killed, alive


def next_look(alive: Mapping[int, float], tick: float, now: float) -> float:
    """Seconds until the next look at the ledger: a tick, or less when a lease runs out sooner.

    Why: a lease that runs out between two looks would otherwise be killed up to a tick late; an agent
    gone with a long tick (a slow host's) would leave its tasks running that long past their deadlines.
    """
    if not alive:
        return tick
    return min(tick, max(0.0, min(alive.values()) - now) + PAST_DEADLINE)


def main(argv: list[str] | None = None) -> int:
    """Enforce the leases in DIR every TICK seconds (and at each deadline) until the agent is gone and no
    leased group is left."""
    args = sys.argv[1:] if argv is None else argv
    directory, tick = Path(args[0]), float(args[1])
    orphans: dict[int, float] | None = None  # once the agent is gone: the groups it left, the only ones watched
    while True:
        killed, alive = expire(directory, lease_clock(), orphans)
        for pgid in killed:
            print(f"iris lease watchdog: lease of process group {pgid} expired; killed", file=sys.stderr, flush=True)
        if orphans is not None:
            if not alive:
                return 0
            orphans = alive
            time.sleep(next_look(alive, tick, lease_clock()))
            continue
        readable, _, _ = select.select([0], [], [], next_look(alive, tick, lease_clock()))
        if readable and not os.read(0, 512):
            # End of file: the agent is gone; its leases will not be renewed. The groups it left are those the
            # ledger holds now (read again: it may have started one since the last look); what a later agent
            # with the same ledger starts is that agent's watchdog's to enforce.
            orphans = expire(directory, lease_clock())[1]


if __name__ == "__main__":
    sys.exit(main())
