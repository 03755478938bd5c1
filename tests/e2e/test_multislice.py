"""Multi-slice gangs on the local cluster: two 2-host slices placed at once, MEGASCALE_* set, one failure domain."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris import Constraint, CoschedulingConfig, IrisClient, JobState, ResourceSpec, TaskState
from iris.config.cluster_file import LocalWorkerSpec
from scheduler.types import AttrValue
from tests.support import Cluster, forget_workers, pid_gone, wait_until

SLICES = ("ms-a", "ms-b")
HOSTS = [f"{name}-{i}" for name in SLICES for i in range(2)]
MULTI = dict(
    resources=ResourceSpec(cpu=1, memory="1g", replicas=4),
    coscheduling=CoschedulingConfig("tpu-name", num_groups=2),
    constraints=[Constraint("pool", "EQ", "multislice")],
)


@pytest.fixture(scope="module")
def two_slices(cluster: Cluster, client: IrisClient) -> Iterator[None]:
    """Two fake 2-host slices (tpu-name ms-a and ms-b), registered for this module and removed after it."""
    for name in SLICES:
        for i in range(2):
            attributes: dict[str, AttrValue] = {"tpu-name": name, "tpu-worker-id": i, "pool": "multislice"}
            cluster.local.start_worker(LocalWorkerSpec(f"{name}-{i}", 1000, 1 << 30, attributes))
    try:
        wait_until(
            lambda: set(HOSTS) <= {w.worker_id for w in client.list_workers() if w.healthy},
            timeout=60, what="the slice hosts registered",
        )  # fmt: skip
        yield
    finally:
        for worker_id in HOSTS:
            cluster.local.stop_worker(worker_id)
        forget_workers(cluster, HOSTS)


def placement() -> dict[str, str]:
    """What a task reports about itself: its worker and the MEGASCALE_* variables it was given."""
    keys = ("IRIS_WORKER_ID", "IRIS_TASK_INDEX", "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID",
            "MEGASCALE_COORDINATOR_ADDRESS", "JAX_COORDINATOR_ADDRESS")  # fmt: skip
    return {key: os.environ.get(key, "") for key in keys}


@pytest.mark.usefixtures("two_slices")
def test_two_slice_gang_gets_megascale_env(client: IrisClient) -> None:
    """Tasks 0-1 run on ms-a and 2-3 on ms-b, each told the slice count, its slice and slice 0's first host
    with a port reserved there for MegaScale (not JAX's coordinator port)."""
    job = client.submit(placement, **MULTI)  # type: ignore[arg-type]
    status = job.wait(timeout=90)
    assert JobState.SUCCEEDED == status.state
    results = job.results()
    coordinator, jax_coordinator = results[0]["MEGASCALE_COORDINATOR_ADDRESS"], results[0]["JAX_COORDINATOR_ADDRESS"]
    assert coordinator.startswith("127.0.0.1:") and coordinator != jax_coordinator
    expected = [
        {"IRIS_WORKER_ID": worker, "IRIS_TASK_INDEX": str(i), "MEGASCALE_NUM_SLICES": "2",
         "MEGASCALE_SLICE_ID": str(i // 2), "MEGASCALE_COORDINATOR_ADDRESS": coordinator,
         "JAX_COORDINATOR_ADDRESS": jax_coordinator}
        for i, worker in enumerate(HOSTS)
    ]  # fmt: skip
    assert expected == results
    assert HOSTS == [t.worker_id for t in status.tasks]


@pytest.mark.usefixtures("two_slices")
def test_a_failure_on_one_slice_kills_the_other_slice_and_the_gang_reruns(client: IrisClient, tmp_path: Path) -> None:
    """Task 3 (slice 1) exits 1 once all four run: tasks 0-1 on slice 0 are killed (processes gone), and
    the whole two-slice gang runs again as attempt 1."""
    script = (
        f'echo "$IRIS_ATTEMPT $$" >> {tmp_path}/task-$IRIS_TASK_INDEX; [ "$IRIS_ATTEMPT" = 0 ] || exit 0; '
        f'if [ "$IRIS_TASK_INDEX" = 3 ]; then while [ "$(ls {tmp_path} | wc -l)" -lt 4 ]; do sleep 0.1; done; '
        'exit 1; fi; sleep 300'
    )
    job = client.submit_command(["sh", "-c", script], max_retries_failure=1, **MULTI)  # type: ignore[arg-type]
    status = job.wait(timeout=120)
    assert JobState.SUCCEEDED == status.state
    assert [1, 1, 1, 1] == [t.attempt for t in status.tasks]
    assert [1, 1, 1, 1] == [t.failure_count for t in status.tasks]
    for i in range(4):
        runs = [line.split() for line in (tmp_path / f"task-{i}").read_text().splitlines()]
        assert ["0", "1"] == [attempt for attempt, _ in runs]
        first = int(runs[0][1])
        wait_until(lambda pid=first: pid_gone(pid), timeout=10, what=f"task {i}'s first process gone")  # type: ignore[misc]


@pytest.mark.usefixtures("two_slices")
def test_a_failure_without_retries_fails_the_job_with_every_slice_killed(client: IrisClient, tmp_path: Path) -> None:
    """Without a retry budget the job fails: task 3 FAILED, the three others KILLED, none left running."""
    script = (
        f'echo $$ > {tmp_path}/task-$IRIS_TASK_INDEX; '
        f'if [ "$IRIS_TASK_INDEX" = 3 ]; then while [ "$(ls {tmp_path} | wc -l)" -lt 4 ]; do sleep 0.1; done; '
        'exit 1; fi; sleep 300'
    )
    job = client.submit_command(["sh", "-c", script], **MULTI)  # type: ignore[arg-type]
    status = job.wait(timeout=90, raise_on_failure=False)
    assert JobState.FAILED == status.state
    assert [TaskState.KILLED] * 3 + [TaskState.FAILED] == [t.state for t in status.tasks]
    for i in range(4):
        pid = int((tmp_path / f"task-{i}").read_text())
        wait_until(lambda pid=pid: pid_gone(pid), timeout=10, what=f"task {i}'s process gone")  # type: ignore[misc]
