"""The local platform says how a slice host that is gone ended, and knows a host by the process it is.

Real processes on this machine: the hosts are small Python programs started through the platform's
`worker_command` setting, found again the way the platform finds its agents.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from activities.contracts.fleet import ControlPlaneAddress, PlatformState, ScaleGroupSpec
from activities.platforms.local import LocalPlatform
from activities.platforms.local_process import LocalProcess, find_workers, start_worker, stop_processes
from iris.local import healing
from iris.local.record import CONTROLLER, ClusterRecord
from tests.support import wait_until

CONTROL = ControlPlaneAddress(temporal_address="127.0.0.1:1", namespace="default", store_url="file:///nowhere")


def group(program: str, hosts: int = 2) -> ScaleGroupSpec:
    """A group whose hosts run `program` (with the agent's flags as ignored arguments)."""
    return ScaleGroupSpec(
        name="pair", platform="local", hosts_per_slice=hosts, cpu_millis=500, memory_bytes=1 << 28,
        settings={"worker_command": [sys.executable, "-c", program]},
    )  # fmt: skip


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    stop_processes({w: f.process for w, f in find_workers(tmp_path).items()}, grace=2.0)


def test_a_host_killed_by_a_signal_or_exiting_is_said_so_with_what_it_printed(home: Path) -> None:
    """Host 0 prints and exits 3, host 1 waits: PREEMPTED, naming host 0, its exit code and its output;
    then host 1 is SIGKILLed after a new host 0 runs: the error says it was killed by SIGKILL."""
    keep = home / "keep"  # once it exists, host 0 keeps running too
    program = (
        "import os, sys, time\n"
        f"if sys.argv[sys.argv.index('--worker-id') + 1].endswith('-0') and not os.path.exists({str(keep)!r}):\n"
        "    print('no accelerator here', flush=True)\n"
        "    sys.exit(3)\n"
        "time.sleep(60)\n"
    )
    spec = group(program)
    platform = LocalPlatform(spec, home=home)

    async def scenario() -> tuple[str, str, str]:
        await platform.create_slice("pair-a", spec)
        await platform.bootstrap("pair-a", spec, CONTROL)
        exited = await wait_for_state(platform, "pair-a", PlatformState.PREEMPTED)
        keep.touch()
        await platform.bootstrap("pair-a", spec, CONTROL)  # starts host 0 again
        running = await wait_for_state(platform, "pair-a", PlatformState.READY, hosts=2)
        host_1 = wait_until(lambda: find_workers(home).get("pair-a-1"), timeout=10, what="host 1 seen")
        host_1.process.signal_group(signal.SIGKILL)
        killed = await wait_for_state(platform, "pair-a", PlatformState.PREEMPTED)
        return exited, running, killed

    exited, running, killed = asyncio.run(scenario())
    assert exited == "worker process exited: pair-a-0 (exit code 3); no accelerator here"
    assert running == ""
    assert killed == "worker process exited: pair-a-1 (killed by SIGKILL); it printed nothing"


def test_a_host_the_process_table_does_not_show_yet_counts_while_its_process_runs(home: Path) -> None:
    """Hosts whose environment cannot be read as a slice host's (as for a moment while a process execs; here
    for good: `env -i` empties it) count as running while the processes their bootstrap started run: describe
    says READY, a second bootstrap starts no second host, terminate stops them."""
    spec = ScaleGroupSpec(
        name="pair", platform="local", hosts_per_slice=2, cpu_millis=500, memory_bytes=1 << 28,
        settings={"worker_command": ["env", "-i", sys.executable, "-c", "import time; time.sleep(60)"]},
    )  # fmt: skip
    platform = LocalPlatform(spec, home=home)

    async def scenario() -> tuple[list[str], list[str]]:
        await platform.create_slice("pair-b", spec)
        await platform.bootstrap("pair-b", spec, CONTROL)
        first = await platform.describe("pair-b")
        await platform.bootstrap("pair-b", spec, CONTROL)
        second = await platform.describe("pair-b")
        assert first is not None and second is not None and PlatformState.READY == first.state == second.state
        await platform.terminate("pair-b")
        return [h.state for h in first.hosts], [h.state for h in second.hosts]

    first, second = asyncio.run(scenario())
    assert all(state.startswith("pid ") for state in first) and first == second
    assert not any(LocalProcess(int(state.split()[1])).alive() for state in first)  # terminate stopped them


def test_cluster_down_stops_slice_hosts_the_process_table_does_not_show(home: Path) -> None:
    """`iris cluster down` stops the autoscaler's slice hosts by the pids the slice's bootstrap recorded, not
    only those a scan of the process table finds (`env -i` hides these hosts from the scan for good)."""
    spec = ScaleGroupSpec(
        name="pair", platform="local", hosts_per_slice=2, cpu_millis=500, memory_bytes=1 << 28,
        settings={"worker_command": ["env", "-i", sys.executable, "-c", "import time; time.sleep(60)"]},
    )  # fmt: skip
    platform = LocalPlatform(spec, home=home)

    async def started() -> list[int]:
        await platform.create_slice("pair-c", spec)
        await platform.bootstrap("pair-c", spec, CONTROL)
        info = await platform.describe("pair-c")
        assert info is not None and PlatformState.READY == info.state
        return [int(h.state.split()[1]) for h in info.hosts]

    hosts = asyncio.run(started())
    # The scan does not see them once `env -i` has exec'd Python (in the moment before, the process still holds
    # the environment it was started with): waited for, as an event, not read at once (a CI flake).
    wait_until(lambda: not find_workers(home), timeout=10, what="the hosts gone from the scan")
    record = ClusterRecord(home)
    state: dict[str, Any] = {"pids": {}, "start_ticks": {}, "worker_ids": [], "argv": {}}
    record.spawn(state, CONTROLLER, [sys.executable, "-c", "import time; time.sleep(60)"])  # a controller stand-in
    healing.stop(record)  # what `iris cluster down` runs
    assert not [pid for pid in hosts if LocalProcess(pid).alive()]
    assert not record.process(state, CONTROLLER).alive()


async def wait_for_state(platform: LocalPlatform, slice_id: str, state: PlatformState, hosts: int = 0) -> str:
    """The slice's error once describe says `state` (with `hosts` hosts running, when given)."""
    for _ in range(200):
        info = await platform.describe(slice_id)
        running = sum(h.state.startswith("pid ") for h in info.hosts) if info is not None else 0
        if info is not None and info.state == state and (not hosts or running == hosts):
            return info.error
        await asyncio.sleep(0.05)
    raise AssertionError(f"{slice_id} never became {state}: {info}")


def test_a_worker_on_a_reused_pid_is_known_by_its_own_start(home: Path) -> None:
    """A worker that gets the pid of one found before is found with its own start time, so it counts
    as alive and is stopped (a cached process table knew it by the earlier one's, and left it running)."""
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "w-0"]
    env = dict(os.environ)
    for _ in range(20):
        first = start_worker(argv, home=home, worker_id="w-0", env=env)
        wait_until(lambda: set(find_workers(home)) == {"w-0"}, timeout=10, what="the first worker seen")
        stop_processes({"w-0": first}, grace=2.0)
        try:
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(first.pid - 1))  # the next process gets its pid
        except OSError as err:
            pytest.skip(f"cannot choose the next pid here: {err}")
        second = start_worker(argv, home=home, worker_id="w-0", env=env)
        if second.pid == first.pid:
            break
        stop_processes({"w-0": second}, grace=2.0)  # another process took the pid first: again
    else:
        raise AssertionError("never got the same pid twice")
    # Right after its start a process may still be in its exec, its environment unreadable (what
    # LocalPlatform's recorded hosts are for): the scan sees it a moment later.
    found = wait_until(lambda: find_workers(home).get("w-0"), timeout=10, what="the second worker seen").process
    assert (second.pid, second.started) == (found.pid, found.started)
    assert found.alive()
    stop_processes({"w-0": found}, grace=2.0)
    wait_until(lambda: not second.alive(), timeout=5, what="the worker on the reused pid stopped")


def test_a_process_keeps_its_identity_when_the_system_clock_is_set(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Setting the system clock (NTP, a paused VM's clock brought back) moves the boot time the kernel reports,
    and with it every wall-clock process start time at once: a cluster's live processes must not then count as
    gone (a whole local cluster was once seen "not running", and started a second time beside itself)."""
    import psutil._pslinux

    record = ClusterRecord(home)
    state: dict[str, Any] = {"pids": {}, "start_ticks": {}, "worker_ids": [], "argv": {}, "address": "127.0.0.1:1",
                             "ui_url": "", "store_url": ""}
    record.spawn(state, CONTROLLER, [sys.executable, "-c", "import time; time.sleep(60)"])
    worker = start_worker([sys.executable, "-c", "import time; time.sleep(60)", "w-0"], home=home, worker_id="w-0",
                          env=dict(os.environ))  # fmt: skip
    wait_until(lambda: "w-0" in find_workers(home), timeout=10, what="the worker seen")
    booted = psutil._pslinux.boot_time()
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: booted + 30.0)  # the clock was set 30 s ahead
    assert 30.0 == psutil.boot_time() - booted  # what create_time() adds moved
    assert [] == record.info(state).dead
    assert worker.alive()
    assert worker.started == find_workers(home)["w-0"].process.started
    healing.stop(record)
    stop_processes({"w-0": worker}, grace=2.0)
    assert not record.process(state, CONTROLLER).alive() and not worker.alive()  # still signalled: still ours
