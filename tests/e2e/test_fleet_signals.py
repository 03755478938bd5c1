"""The scheduler's fleet interface on a real cluster: cordon, remove, and the autoscaler's snapshot."""

from __future__ import annotations

import subprocess
import sys

from temporalio.client import Client

from activities.contracts import SCHEDULER_WORKFLOW_ID
from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.scheduling import worker_ids
from iris import Constraint, IrisClient, JobState, ResourceSpec
from iris.config.cluster_file import LocalWorkerSpec
from tests.support import Cluster, forget_workers, wait_until
from workflows.messages import CordonWorkers, RemoveWorkers

CPU_WORKERS = ["cpu-0", "cpu-1"]
ON_CPU = {"resources": ResourceSpec(cpu=0.5, memory="256m"), "constraints": [Constraint("pool", "EQ", "cpu")]}


async def _snapshot(temporal: Client) -> pb.SchedulingSnapshot:
    data = await temporal.get_workflow_handle(SCHEDULER_WORKFLOW_ID).query("autoscale_snapshot", result_type=bytes)
    return pb.SchedulingSnapshot.FromString(compressed.decompress(data))


def _cordoned(client: IrisClient) -> set[str]:
    return {w.worker_id for w in client.list_workers() if w.cordoned}


async def test_cordon_keeps_running_work_holds_new_work_and_is_undone(cluster: Cluster, client: IrisClient) -> None:
    """Cordoned workers finish what runs there, get nothing new, and leave the autoscaler's snapshot."""
    temporal = await Client.connect(cluster.info.address)
    scheduler = temporal.get_workflow_handle(SCHEDULER_WORKFLOW_ID)
    script = "import time; time.sleep(3)"
    running = client.submit_command([sys.executable, "-c", script], **ON_CPU)  # type: ignore[arg-type]
    wait_until(lambda: running.status().state == JobState.RUNNING, timeout=60, what="first job running")
    await scheduler.signal("cordon_workers", CordonWorkers(CPU_WORKERS, reason="test drain"))
    try:
        wait_until(lambda: _cordoned(client) == set(CPU_WORKERS), timeout=30, what="workers listed as cordoned")
        held = client.submit_command(["true"], **ON_CPU)  # type: ignore[arg-type]
        assert JobState.SUCCEEDED == running.wait(timeout=60).state  # running work goes on
        pending = wait_until(
            lambda: (s := held.status()).pending_reason and s, timeout=30, what="held job has a pending reason"
        )
        assert JobState.PENDING == pending.state
        snap = await _snapshot(temporal)
        assert not set(worker_ids(snap)) & set(CPU_WORKERS)
        assert {"slice-a-0", "slice-a-1", "slice-a-2", "slice-a-3"} <= set(worker_ids(snap))
        assert held.job_id in set(snap.queue.job_ids)
        assert JobState.PENDING == held.status().state
    finally:
        await scheduler.signal("cordon_workers", CordonWorkers(CPU_WORKERS, cordoned=False, reason="test done"))
    assert JobState.SUCCEEDED == held.wait(timeout=60).state
    assert set() == _cordoned(client)
    snap = await _snapshot(temporal)
    assert set(CPU_WORKERS) <= set(worker_ids(snap))
    assert held.job_id not in set(snap.queue.job_ids)


def test_a_cordon_survives_the_workers_restart(cluster: Cluster, client: IrisClient) -> None:
    """A drained worker whose agent restarts (a new session registers) still gets no new work."""
    spec = LocalWorkerSpec("restarted-0", cpu_millis=1000, memory_bytes=1 << 30, attributes={"pool": "restarted"})
    cluster.local.start_worker(spec)
    try:
        wait_until(lambda: "restarted-0" in {w.worker_id for w in client.list_workers()}, timeout=60, what="up")
        client.cordon_worker("restarted-0")
        # Kept down until the test starts it again: the session cluster may have a supervisor by now (a test that
        # ran `iris run` against it started one), which restarted the agent before the test could.
        cluster.local.kill_process("restarted-0", wait=10, keep_down=True)
        wait_until(
            lambda: not any(w.worker_id == "restarted-0" and w.healthy for w in client.list_workers()),
            timeout=60, what="the stopped agent noticed",
        )  # fmt: skip
        cluster.local.start_worker(spec)
        wait_until(
            lambda: any(w.worker_id == "restarted-0" and w.healthy for w in client.list_workers()),
            timeout=60, what="registered again",
        )  # fmt: skip
        assert "restarted-0" in _cordoned(client)
        status = subprocess.run([sys.executable, "-m", "iris", "cluster", "status"], env=cluster.env,
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert ", 1 cordoned" in status.stdout, status.stdout  # it counted as one more healthy worker
    finally:
        cluster.local.stop_worker("restarted-0")
        forget_workers(cluster, ["restarted-0"])


async def test_removed_workers_leave_the_list_at_once(cluster: Cluster, client: IrisClient) -> None:
    """A worker whose slice was deleted is gone from the list and the snapshot right after the signal."""
    spec = LocalWorkerSpec("doomed-0", cpu_millis=1000, memory_bytes=1 << 30, attributes={"pool": "doomed"})
    cluster.local.start_worker(spec)
    try:
        wait_until(lambda: "doomed-0" in {w.worker_id for w in client.list_workers()}, timeout=60, what="registered")
        temporal = await Client.connect(cluster.info.address)
        await temporal.get_workflow_handle(SCHEDULER_WORKFLOW_ID).signal(
            "remove_workers", RemoveWorkers(["doomed-0"], reason="slice deleted")
        )
        wait_until(lambda: "doomed-0" not in {w.worker_id for w in client.list_workers()}, timeout=30, what="removed")
        assert "doomed-0" not in set(worker_ids(await _snapshot(temporal)))
    finally:
        cluster.local.stop_worker("doomed-0")
