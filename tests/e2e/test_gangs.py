"""Coscheduled jobs are retried as a unit: a broken gang is killed whole and placed again whole."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from iris import CoschedulingConfig, IrisClient, JobState, JobStatus, ResourceSpec, TaskState
from iris.config.cluster_file import LocalWorkerSpec, parse_config
from tests.support import Cluster, pid_gone, wait_until

from .conftest import TEST_FLEET

# The dying host's agent declares a 4 s heartbeat timeout with a 3 s lease (the agent's own settings, inherited
# from the environment it starts in): its attempt is lost 4 s after it dies and may run again 1 s later (lease +
# margin - timeout), not 10 s + 2 s with the defaults. The test needs the loss to happen, not the default's length.
SHORT_LEASE = {"IRIS_HEARTBEAT_TIMEOUT_SECONDS": "4", "IRIS_LEASE_SECONDS": "3"}
GANG = dict(resources=ResourceSpec(cpu=1, memory="1g", replicas=4), coscheduling=CoschedulingConfig("tpu-name"))


def test_gang_member_failure_retries_the_whole_gang(client: IrisClient, tmp_path: Path) -> None:
    """Task 0 fails on the first attempt: all four tasks are killed and rerun together as attempt 1."""
    script = (
        f'echo "$IRIS_ATTEMPT $$" >> {tmp_path}/task-$IRIS_TASK_INDEX; '
        'if [ "$IRIS_ATTEMPT" = 0 ]; then if [ "$IRIS_TASK_INDEX" = 0 ]; then sleep 1; exit 1; fi; sleep 300; fi'
    )
    job = client.submit_command(["sh", "-c", script], max_retries_failure=1, **GANG)  # type: ignore[arg-type]
    status = job.wait(timeout=90)
    assert JobState.SUCCEEDED == status.state
    assert [1, 1, 1, 1] == [t.attempt for t in status.tasks]
    assert [1, 1, 1, 1] == [t.failure_count for t in status.tasks]
    assert [f"slice-a-{i}" for i in range(4)] == [t.worker_id for t in status.tasks]
    for i in range(4):
        runs = (tmp_path / f"task-{i}").read_text().split("\n")[:-1]
        assert ["0", "1"] == [r.split()[0] for r in runs]
        assert pid_gone(int(runs[0].split()[1]))


def _restart_with_a_short_heartbeat_timeout(cluster: Cluster, client: IrisClient, host: LocalWorkerSpec) -> None:
    """Start `host`'s agent again declaring SHORT_LEASE: its attempts are lost 4 s after it dies, not 10 s."""
    cluster.local.stop_worker(host.worker_id)
    wait_until(lambda: not any(w.worker_id == host.worker_id and w.healthy for w in client.list_workers()),
               timeout=30, what="the stopped agent's session ended")  # fmt: skip
    with pytest.MonkeyPatch.context() as env:  # read when the agent is spawned: only this one start declares it
        for name, value in SHORT_LEASE.items():
            env.setenv(name, value)
        cluster.local.start_worker(host)
    wait_until(lambda: any(w.worker_id == host.worker_id and w.healthy for w in client.list_workers()),
               timeout=60, what="the agent registered again")  # fmt: skip


def test_gang_waits_for_a_whole_slice_after_a_host_dies(cluster: Cluster, client: IrisClient, tmp_path: Path) -> None:
    """SIGKILL one slice host under a running gang: siblings are killed, the gang waits, and reruns whole."""
    host = next(w for w in parse_config(TEST_FLEET, "t").local_workers() if w.worker_id == "slice-a-2")
    _restart_with_a_short_heartbeat_timeout(cluster, client, host)
    script = f'echo "$IRIS_ATTEMPT $$" >> {tmp_path}/task-$IRIS_TASK_INDEX; [ "$IRIS_ATTEMPT" != 0 ] || sleep 300'
    job = client.submit_command(["sh", "-c", script], **GANG)  # type: ignore[arg-type]
    wait_until(lambda: len(list(tmp_path.glob("task-*"))) == 4, timeout=30)
    killed_at = time.monotonic()
    # Down for good until the test brings it back: the cluster's supervisor would restart it within a second, and
    # the gang then ran again before it could be seen waiting (or the test's start found it already running).
    cluster.local.kill_process("slice-a-2", signal.SIGKILL, wait=5, keep_down=True)
    try:
        def requeued() -> JobStatus | None:  # the job's row and its tasks' rows are reported apart
            s = job.status()
            whole = s.state == JobState.PENDING and all(t.state == TaskState.PENDING for t in s.tasks)
            return s if whole and s.pending_reason and all(t.preemption_count for t in s.tasks) else None

        waiting = wait_until(requeued, timeout=40, what="the whole gang re-queued")
        detection = time.monotonic() - killed_at
        print(f"gang host loss detected and gang re-queued after {detection:.1f} s")
        assert [1, 1, 1, 1] == [t.preemption_count for t in waiting.tasks]
        for i in (0, 1, 3):
            first = (tmp_path / f"task-{i}").read_text().split("\n")[0]
            assert pid_gone(int(first.split()[1]))
    finally:
        cluster.local.start_worker(host)  # with the defaults again, as the session cluster started it
    status = job.wait(timeout=90)
    assert JobState.SUCCEEDED == status.state
    assert [1, 1, 1, 1] == [t.attempt for t in status.tasks]
    assert [f"slice-a-{i}" for i in range(4)] == [t.worker_id for t in status.tasks]
