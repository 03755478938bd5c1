"""Big scheduling passes run in a child process: the same plan, beats while it computes, no child left behind.

The pass moved out of the controller so it stops holding the GIL the scheduler workflow's tasks need
(activities.pass_pool); these tests hold it to what a user relies on: the plan does not change, a long
pass is not taken for a dead controller, a cancelled or crashed one is retried on a fresh child, and the
child never outlives its controller, however that ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psutil
import pytest
from temporalio import activity, workflow
from temporalio.client import WorkflowFailureError
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError, CancelledError
from temporalio.worker import UnsandboxedWorkflowRunner

from activities.heartbeat import heartbeating_thread
from activities.pass_pool import MIN_BYTES_ENV, PASS_PROCESS_MIN_BYTES, POOL, PassProcessError, run_pass
from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.scheduling import plan_pass
from iris import IrisClient
from iris.local.cluster import LocalCluster
from iris.local.commands import controller_command
from tests.support import pid_gone, wait_until, workflows_on_dev_server
from tests.test_scheduler_state import _fleet
from workflows.scheduler.snapshot_cache import encode_snapshot

BEAT = 0.2


def pid_here(_: bytes) -> int:
    """Where a pass runs."""
    return os.getpid()


def sleep_here(data: bytes) -> int:
    """A pass that takes `data` seconds; where it ran."""
    time.sleep(float(data))
    return os.getpid()


@pytest.fixture
def pool_stopped() -> Iterator[None]:
    """Each test starts without a child and leaves none."""
    POOL.shutdown()
    yield
    POOL.shutdown()


def test_a_big_pass_gives_the_same_plan_in_the_child(pool_stopped: None) -> None:
    """2,000 workers with 20,000 tasks queued and 2,000 running: the child's plan is the in-process plan, byte for
    byte (assignments, reasons, timeouts), and run_pass sends such a snapshot to the child."""
    snapshot = encode_snapshot(_fleet(2000, 2000, 10, 1), 1e9 + 5)
    assert compressed.content_size(snapshot) >= PASS_PROCESS_MIN_BYTES > len(snapshot)  # its size is uncompressed
    here = plan_pass(snapshot)
    there = POOL.run(plan_pass, snapshot)
    assert here == there
    plan = pb.SchedulingPlan.FromString(compressed.decompress(there))
    assert 0 < len(plan.assignments)
    child = POOL.pid()
    assert child not in (None, os.getpid())
    assert child == run_pass(pid_here, snapshot)
    small = encode_snapshot(_fleet(20, 20, 10, 1), 1e9 + 5)
    assert compressed.content_size(small) < PASS_PROCESS_MIN_BYTES
    assert os.getpid() == run_pass(pid_here, small)  # a small one stays here


def test_a_small_snapshot_never_starts_the_child(pool_stopped: None) -> None:
    """A small cluster's passes run in the activity's thread and start no process."""
    before = psutil.Process().children()
    snapshot = encode_snapshot(_fleet(20, 5, 2, 0), 1e9)
    assert os.getpid() == run_pass(pid_here, snapshot)
    assert POOL.pid() is None
    assert before == psutil.Process().children()


def test_a_pass_in_a_child_that_dies_fails_and_the_next_gets_a_fresh_child(pool_stopped: None) -> None:
    """A child killed mid-pass fails that pass (Temporal retries the activity); the next pass runs in a new child."""
    first = POOL.run(pid_here, b"")
    assert first is not None
    failed: list[BaseException] = []

    def long_pass() -> None:
        try:
            POOL.run(sleep_here, b"30")
        except BaseException as err:
            failed.append(err)

    runner = threading.Thread(target=long_pass)
    runner.start()
    time.sleep(0.5)
    os.kill(first, signal.SIGKILL)
    runner.join(timeout=10)
    assert [PassProcessError] == [type(e) for e in failed]
    second = POOL.run(pid_here, b"")
    assert second != first


@activity.defn
def passes_in_the_child(seconds: float) -> int:
    """The scheduling activity's shape: beats from a side thread while the pass runs in the child."""
    with heartbeating_thread(every=BEAT):
        return run_pass(sleep_here, str(seconds).encode())


@workflow.defn(versioning_behavior=VersioningBehavior.PINNED)
class OnePass:
    @workflow.run
    async def run(self, seconds: float, cancel_after: float) -> int:
        handle = workflow.start_activity(
            passes_in_the_child, seconds, start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=1), retry_policy=RetryPolicy(maximum_attempts=1),
        )  # fmt: skip
        if cancel_after:
            await workflow.sleep(cancel_after)
            handle.cancel()
        return await handle


async def test_the_activity_beats_while_the_child_computes_and_a_cancelled_pass_stops_it(
    pool_stopped: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1.5 s pass in the child (after the child's start) outlives a 1 s heartbeat timeout; a cancelled pass takes
    its child with it, and the next pass starts a new one."""
    monkeypatch.setenv(MIN_BYTES_ENV, "0")  # every pass goes to the child
    async with workflows_on_dev_server("pass-process", [OnePass], [passes_in_the_child],
                                       UnsandboxedWorkflowRunner()) as (client, queue):  # fmt: skip
        child = await client.execute_workflow(OnePass.run, args=[1.5, 0.0], id=f"{queue}-beats", task_queue=queue)
        assert child not in (None, os.getpid())
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(OnePass.run, args=[60.0, 2.0], id=f"{queue}-cancel", task_queue=queue)
        assert isinstance(failed.value.cause, ActivityError)
        assert isinstance(failed.value.cause.cause, CancelledError)
        await asyncio.to_thread(wait_until, lambda: pid_gone(child), 10.0, 0.1, "the cancelled pass's child gone")
        fresh = await client.execute_workflow(OnePass.run, args=[0.0, 0.0], id=f"{queue}-after", task_queue=queue)
        assert fresh != child


def _pass_processes(controller: int) -> list[psutil.Process]:
    """The controller's pass child (and the resource tracker that comes with it), once there."""
    try:
        found = psutil.Process(controller).children(recursive=True)
        return found if any("spawn_main" in " ".join(p.cmdline()) for p in found) else []
    except psutil.Error:  # the controller, or one of its children, ended meanwhile
        return []


def _gone(processes: list[psutil.Process]) -> bool:
    return all(pid_gone(p.pid) for p in processes)


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path / "home")
    local.up(components=("temporal",))
    try:
        yield local
    finally:
        local.down()


def _controller(local: LocalCluster) -> subprocess.Popen[bytes]:
    info = local.status()
    assert info is not None
    argv = controller_command(address=info.address, store_url=info.store_url)
    log = (local.home / "controller.log").open("ab")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, MIN_BYTES_ENV: "0"})  # fmt: skip


def _submit(local: LocalCluster, name: str) -> None:
    """A job no worker can take: it waits in the queue, so the scheduler runs passes."""
    info = local.status()
    assert info is not None
    with IrisClient.connect(info.address, store=info.store_url) as iris:
        iris.submit_command(["true"], name=name)


def _ends_with_its_children(local: LocalCluster, how: signal.Signals) -> None:
    """Start a controller, have it start its pass child, end it with `how`: every process it started is gone."""
    controller = _controller(local)
    try:
        _submit(local, f"waits-{how.name.lower()}")
        children = wait_until(lambda: _pass_processes(controller.pid), 90, 0.2, "the pass child started")
        os.kill(controller.pid, how)
        controller.wait(timeout=30)
        wait_until(lambda: _gone(children), 10, 0.1, f"the controller's children gone after {how.name}")
    finally:
        if controller.poll() is None:
            os.killpg(controller.pid, signal.SIGKILL)
            controller.wait()


def test_the_child_never_outlives_its_controller(dev_server: LocalCluster) -> None:
    """A controller SIGKILLed alone (not its group) leaves no process behind; one stopped with SIGTERM neither.

    SIGTERM goes first: a SIGKILLed controller leaves its pass activity to time out (its 5 s heartbeat timeout)
    before the next controller's scheduler passes again, while a stopped one hands it back at once."""
    _ends_with_its_children(dev_server, signal.SIGTERM)
    _ends_with_its_children(dev_server, signal.SIGKILL)


def child_thresholds(_: bytes) -> tuple[int, int, int]:
    """Run in the pass process: its collector's thresholds."""
    import gc

    return gc.get_threshold()


def test_the_pass_process_and_the_scheduler_bench_collect_as_the_controller() -> None:
    """A controller's pass process runs with the collector thresholds the controller set, and `python -m
    scheduler.bench` times its pass with the same ones (its figure is the control plane's pass)."""
    from iris.controller.gc_tuning import THRESHOLDS
    from scheduler.bench import PASS_GC_THRESHOLDS

    script = (
        "from iris.controller.gc_tuning import tune_for_controller\n"
        "from activities.pass_pool import PassPool\n"
        "from tests.test_pass_process import child_thresholds\n"
        "tune_for_controller()\n"
        "pool = PassPool()\n"
        "print(list(pool.run(child_thresholds, b'')))\n"
        "pool.shutdown()\n"
    )
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert 0 == done.returncode, done.stderr
    assert list(THRESHOLDS) == json.loads(done.stdout.strip().splitlines()[-1])
    assert THRESHOLDS == PASS_GC_THRESHOLDS
