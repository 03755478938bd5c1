"""Leases on the process runtime: a task whose agent stops renewing its lease dies, by the watchdog's hand."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from activities.contracts import LEASE_EXPIRED_REASON
from activities.process_start import start_ticks
from worker_agent.leases.lease_settings import LeaseSettings
from worker_agent.leases.lease_watchdog import PAST_DEADLINE, lease_clock, next_look
from worker_agent.runtimes.base import LeasedRuntime, TaskHandle, TaskSpec
from worker_agent.runtimes.process import ProcessRuntime
from worker_agent.storage import LogStore
from workflows.tasks.fencing import fence_seconds

LEASE = 1.0


@pytest.fixture
async def leased(tmp_path: Path) -> AsyncIterator[ProcessRuntime]:
    """A process runtime whose tasks hold 1 s leases; every task it started is killed afterwards."""
    runtime = ProcessRuntime(ledger_dir=tmp_path / "ledger", lease_seconds=LEASE, warm=False, limits=False)
    await runtime.recover()
    yield runtime
    for handle in list(runtime._tasks):
        await runtime.kill(handle, 0)
    await runtime.close()


def _spec(log_store: LogStore, script: str, deadline: float) -> TaskSpec:
    return TaskSpec(argv=["sh", "-c", script], log=log_store.open_writer("job", 0, 0), lease_deadline=deadline)


async def _eventually_gone(pgid: int, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while _children_of_group(pgid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def _children_of_group(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdecimal():
            with contextlib.suppress(OSError, IndexError):
                stat = (entry / "stat").read_text()
                fields = stat[stat.rfind(")") + 2 :].split()
                if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                    found.append(int(entry.name))
    return found


async def test_a_task_whose_lease_is_not_renewed_dies_whole_and_says_why(
    leased: ProcessRuntime, log_store: LogStore
) -> None:
    """Nobody renews: the watchdog SIGKILLs the task's whole group about `lease` after the deadline was set,
    and the exit says the lease expired."""
    assert isinstance(leased, LeasedRuntime) and leased.leases
    began = lease_clock()
    handle = await leased.start(_spec(log_store, "sleep 60 & sleep 60", began + LEASE))
    pgid = int(handle)
    await asyncio.sleep(0.2)
    assert 2 <= len(_children_of_group(pgid))  # the shell and its background child run
    ended = await asyncio.wait_for(leased.wait(handle), timeout=5 * LEASE)
    took = lease_clock() - began
    assert (True, LEASE_EXPIRED_REASON, -signal.SIGKILL) == (ended.fenced, ended.reason, ended.exit_code)
    assert LEASE <= took < LEASE + 1.0
    assert await _eventually_gone(pgid)


async def test_a_renewed_task_outlives_many_leases(leased: ProcessRuntime, log_store: LogStore) -> None:
    """Renewed every 0.3 s, a task runs on for 3x its lease; once renewals stop it dies."""
    handle = await leased.start(_spec(log_store, "sleep 60", lease_clock() + LEASE))
    waiting = asyncio.ensure_future(leased.wait(handle))
    until = time.monotonic() + 3 * LEASE
    while time.monotonic() < until:
        leased.renew(handle, lease_clock() + LEASE)
        await asyncio.sleep(0.3)
        assert not waiting.done()
    ended = await asyncio.wait_for(waiting, timeout=5 * LEASE)
    assert ended.fenced


async def test_the_watchdog_is_replaced_when_it_dies(leased: ProcessRuntime, log_store: LogStore) -> None:
    """A watchdog that dies is started again at the next renewal, and still fences the task."""
    handle = await leased.start(_spec(log_store, "sleep 60", lease_clock() + LEASE))
    first = leased.lease_watchdog_pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    await asyncio.sleep(0.1)
    leased.renew(handle, lease_clock() + LEASE)
    assert leased.lease_watchdog_pid not in (None, first)
    assert (await asyncio.wait_for(leased.wait(handle), timeout=5 * LEASE)).fenced


def test_the_watchdog_outlives_its_agent_and_kills_only_the_task_it_recorded(tmp_path: Path) -> None:
    """With its agent gone (its pipe closed), the watchdog kills a leased group at its deadline, leaves a
    process whose number was reused alone, and exits once no leased group is left."""
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    task = subprocess.Popen(["sleep", "60"], start_new_session=True)
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        (ledger / str(task.pid)).write_text(f"\n{lease_clock() + LEASE!r}\n{start_ticks(task.pid)}\n")
        # An entry whose leader started at another time: the number was reused by someone else.
        (ledger / str(stranger.pid)).write_text(f"\n{lease_clock() - 5!r}\n{(start_ticks(stranger.pid) or 0) + 1}\n")
        watchdog = subprocess.Popen(
            [sys.executable, "-m", "worker_agent.leases.lease_watchdog", str(ledger), "0.1"],
            stdin=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        assert watchdog.stdin is not None
        watchdog.stdin.close()  # the agent is gone
        began = time.monotonic()
        assert -signal.SIGKILL == task.wait(timeout=5 * LEASE)
        assert time.monotonic() - began < LEASE + 1.0
        assert 0 == watchdog.wait(timeout=5)
        assert (ledger / f"{task.pid}.fenced").exists()
        assert stranger.poll() is None
    finally:
        for process in (task, stranger):
            process.kill()
            process.wait()


def test_a_task_started_just_before_its_agent_died_is_still_fenced(tmp_path: Path) -> None:
    """The agent records a task and dies within the watchdog's tick: the watchdog, told of the death at
    once, still finds the task and kills it at its deadline (not at its next tick, 5 s on)."""
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    tick = 5.0
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "worker_agent.leases.lease_watchdog", str(ledger), str(tick)],
        stdin=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    task = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        time.sleep(0.5)  # the watchdog has looked at an empty ledger and waits its (long) tick
        (ledger / str(task.pid)).write_text(f"\n{lease_clock() + LEASE!r}\n{start_ticks(task.pid)}\n")
        began = time.monotonic()
        assert watchdog.stdin is not None
        watchdog.stdin.close()
        assert -signal.SIGKILL == task.wait(timeout=10 * LEASE)
        assert time.monotonic() - began < LEASE + 1.0 < tick
        assert 0 == watchdog.wait(timeout=10)
    finally:
        for process in (task, watchdog):
            process.kill()
            process.wait()


def test_the_watchdog_looks_again_at_the_next_deadline_when_it_comes_before_the_tick() -> None:
    """The watchdog's next look: its tick, or just past the earliest deadline it holds when that is sooner."""
    assert 5.0 == next_look({}, 5.0, 100.0)
    assert 5.0 == next_look({7: 120.0}, 5.0, 100.0)
    assert 2.0 + PAST_DEADLINE == pytest.approx(next_look({7: 120.0, 8: 102.0}, 5.0, 100.0))
    assert PAST_DEADLINE == next_look({7: 99.0}, 5.0, 100.0)  # overdue (the look found it alive just before)


def test_fence_seconds_waits_out_what_the_heartbeat_timeout_did_not() -> None:
    """The wait after a heartbeat timeout is lease + margin - timeout (at least 0); no lease, no wait."""
    settings = LeaseSettings(seconds=10, margin_seconds=2)
    assert 6.0 == fence_seconds(["process-started", {"cpu_seconds": 1.0}, settings.detail()], 6.0)
    assert 0.0 == fence_seconds(["leased", LeaseSettings(seconds=3, margin_seconds=2).detail()], 6.0)
    assert None is fence_seconds(["process-started", {"cpu_seconds": 1.0}], 6.0)
    assert None is fence_seconds([], 6.0)
    assert None is fence_seconds([{"lease_seconds": "soon"}], 6.0)


def test_lease_settings_renew_several_times_per_lease_and_refuse_nonsense() -> None:
    """A short lease is renewed at least three times within it; a lease or margin out of range names itself."""
    assert 1.0 == LeaseSettings(seconds=3).interval
    assert 3.0 == LeaseSettings(seconds=30).interval
    with pytest.raises(ValueError, match="lease: must be > 0"):
        LeaseSettings(seconds=0)
    with pytest.raises(ValueError, match="lease margin"):
        LeaseSettings(margin_seconds=-1)
    with pytest.raises(ValueError, match="lease_deadline"):
        TaskSpec(argv=["true"], log=open(os.devnull, "wb"), lease_deadline=-1)  # noqa: SIM115


async def test_without_a_lease_nothing_is_fenced(tmp_path: Path, log_store: LogStore) -> None:
    """A runtime built without a lease starts no watchdog and kills nothing on its own."""
    runtime = ProcessRuntime(ledger_dir=tmp_path / "ledger", warm=False, limits=False)
    assert not runtime.leases
    handle = await runtime.start(_spec(log_store, "sleep 60", lease_clock() - 10))
    try:
        await asyncio.sleep(0.5)
        assert runtime.task(TaskHandle(handle)).is_running()
        assert runtime.lease_watchdog_pid is None
    finally:
        await runtime.kill(handle, 0)
        await runtime.close()


def test_a_restarted_agent_kills_what_its_predecessor_left_even_after_the_clock_was_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger knows a task's group by its leader's start in ticks since boot: after the system clock was
    set (the boot time psutil adds moved), a restarted agent still kills the group its predecessor left, and
    still leaves alone a group whose number another process now holds."""
    import psutil._pslinux

    from worker_agent.runtimes.process import ProcessGroupLedger

    left = subprocess.Popen(["sleep", "60"], start_new_session=True)
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        ProcessGroupLedger(tmp_path).add(left.pid)  # what the dead agent wrote
        (tmp_path / str(stranger.pid)).write_text(f"\n0.0\n{(start_ticks(stranger.pid) or 0) + 1}\n")  # reused
        booted = psutil._pslinux.boot_time()
        monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: booted - 45.0)  # the clock was set back
        assert [left.pid] == ProcessGroupLedger(tmp_path).kill_leftovers()
        assert -signal.SIGKILL == left.wait(timeout=5)
        assert stranger.poll() is None
        assert [] == list(tmp_path.iterdir())
    finally:
        for process in (left, stranger):
            process.kill()
            process.wait()
