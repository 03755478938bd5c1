"""A reservation on the local cluster: a job's children run only inside it, others outside it; then it is released."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris import Constraint, IrisClient, JobState, ResourceSpec, TaskState
from iris.config.cluster_file import LocalWorkerSpec
from tests.support import Cluster, wait_until

TAINT = "rsv-e2e"  # keeps the rest of the suite's jobs off these workers
WORKERS = [f"rsv-{i}" for i in range(4)]
WHOLE = ResourceSpec(cpu=1, memory="1g")  # one of these workers
ON_POOL = dict(constraints=[Constraint("pool", "EQ", "rsv")], tolerations=[TAINT])


@pytest.fixture
def pool(cluster: Cluster) -> Iterator[list[str]]:
    """Four one-cpu workers only the jobs of this test tolerate."""
    for worker_id in WORKERS:
        cluster.local.start_worker(
            LocalWorkerSpec(worker_id, 1000, 1 << 30, attributes={"pool": "rsv", f"taint:{TAINT}": True})
        )
    try:
        yield WORKERS
    finally:
        for worker_id in WORKERS:
            cluster.local.stop_worker(worker_id)


CHILD = (
    'log={out}/$(basename "$IRIS_JOB_ID").log; '
    'echo "start $(date +%s.%N) $IRIS_WORKER_ID $IRIS_RESERVATION_ID" >> $log; '
    'sleep 2; echo "end $(date +%s.%N)" >> $log'
)


def _parent(address: str, store: str, out: str) -> int:
    """The reserving job's task: submit five one-worker children (named under its job), wait, then for `release`."""
    from iris import Constraint, IrisClient, ResourceSpec
    on_pool = [Constraint("pool", "EQ", "rsv")]
    with IrisClient.connect(address, store=store) as client:
        children = [
            client.submit_command(
                ["sh", "-c", CHILD.format(out=out)], name=f"child-{i}", constraints=on_pool,
                resources=ResourceSpec(cpu=1, memory="1g"), tolerations=[TAINT],
            )
            for i in range(5)
        ]
        for child in children:
            child.wait(timeout=300)
    while not (Path(out) / "release").exists():
        time.sleep(0.2)
    return len(children)


def _intervals(out: Path) -> list[tuple[float, float, str, str]]:
    """(start, end, worker, reservation id) of every child, from what each wrote."""
    rows = []
    for log in out.rglob("*.log"):
        lines = [line.split() for line in log.read_text().splitlines()]
        start = next((line for line in lines if line[0] == "start"), None)
        end = next((line for line in lines if line[0] == "end"), None)
        if start is None or end is None:
            continue  # still running
        rows.append((float(start[1]), float(end[1]), start[2], start[3] if len(start) > 3 else ""))
    return rows


def test_children_run_inside_the_reservation_and_others_outside(
    cluster: Cluster, client: IrisClient, pool: list[str], tmp_path: Path
) -> None:
    """2 reserved workers run 5 one-worker children (never more than 2 at once, all on the reserved
    workers), another job meanwhile runs only on the other two; once the parent ends, the reserved
    workers take other work."""
    parent = client.submit(
        _parent, cluster.info.address, cluster.info.store_url, str(tmp_path),
        name="reserver", resources=ResourceSpec(cpu=0.25, memory="256m"),
        constraints=[Constraint("pool", "EQ", "cpu")],
        reservation=[ResourceSpec(cpu=1, memory="1g", replicas=2)],
        reservation_constraints=[Constraint("pool", "EQ", "rsv")], tolerations=[TAINT],
    )  # fmt: skip
    held = wait_until(
        lambda: next((r for r in client.list_reservations() if r.job_id == parent.job_id and r.held == 2), None),
        timeout=60, what="the reservation held on two workers",
    )  # fmt: skip
    reserved = {w.worker_id for w in held.workers}
    assert f"rsv-{parent.job_id}" == held.reservation_id
    assert 2 == len(reserved) and reserved <= set(pool)
    listed = subprocess.run([sys.executable, "-m", "iris", "reservation", "list"], env=cluster.env,
                            capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert held.reservation_id in listed.stdout and parent.job_id in listed.stdout
    assert all(worker in listed.stdout for worker in reserved), listed.stdout
    with urllib.request.urlopen(f"{cluster.info.dashboard_url}/reservations", timeout=30) as page:
        html = page.read().decode()
    assert held.reservation_id in html and all(f"/workers/{worker}" in html for worker in reserved)
    other = client.submit_command(
        ["sh", "-c", "sleep 1; echo $IRIS_WORKER_ID"], name="outsider",
        resources=ResourceSpec(cpu=1, memory="1g", replicas=2), **ON_POOL,  # type: ignore[arg-type]
    )  # fmt: skip
    done = other.wait(timeout=120)
    assert JobState.SUCCEEDED == done.state
    assert set() == {t.worker_id for t in done.tasks} & reserved

    rows = wait_until(lambda: (r := _intervals(tmp_path)) and len(r) == 5 and r, timeout=120, what="5 children ran")
    assert reserved >= {worker for _, _, worker, _ in rows}
    assert {held.reservation_id} == {rid for *_, rid in rows}
    events = sorted([(start, 1) for start, *_ in rows] + [(end, -1) for _, end, *_ in rows])
    running, most = 0, 0
    for _, step in events:
        running += step
        most = max(most, running)
    assert 2 == most
    children = [j for j in client.list_jobs(limit=50, name=None) if j.job_id.startswith(parent.job_id + "/")]
    assert 5 == len(children)

    # While the reservation stands, a 4-task job gets only the two unreserved workers ...
    after = client.submit_command(
        ["sleep", "60"], name="after", resources=ResourceSpec(cpu=1, memory="1g", replicas=4), **ON_POOL,  # type: ignore[arg-type]
    )  # fmt: skip
    try:
        two = wait_until(lambda: (s := after.status()).task_state_counts.get(TaskState.RUNNING, 0) == 2 and s,
                         timeout=60, what="two tasks of the 4-task job running")  # fmt: skip
        assert set() == {t.worker_id for t in two.tasks if t.worker_id} & reserved
        assert "2 held by reservations" in two.pending_reason
        # ... and once the parent ends, the reserved ones take the other two.
        (tmp_path / "release").touch()
        assert JobState.SUCCEEDED == parent.wait(timeout=60).state
        released_at = time.monotonic()
        four = wait_until(lambda: (s := after.status()).task_state_counts.get(TaskState.RUNNING, 0) == 4 and s,
                          timeout=60, what="all four tasks running once the reservation is released")  # fmt: skip
        print(f"reserved workers took new work {time.monotonic() - released_at:.2f} s after the parent ended")
        assert reserved <= {t.worker_id for t in four.tasks}
        wait_until(lambda: not any(r.job_id == parent.job_id for r in client.list_reservations()), timeout=30,
                   what="the reservation gone from the published list")  # fmt: skip
    finally:
        client.terminate(after.job_id)
        (tmp_path / "release").touch()
