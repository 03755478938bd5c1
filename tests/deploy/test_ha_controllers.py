"""Several controllers on one Temporal: kill one under a stream of submissions and every job finishes once."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from temporalio.service import RPCError

from iris import IrisClient, JobState, ResourceSpec
from tests.deploy.conftest import Deployment, deployed
from tests.support import lines, short_dead_controller_waits, wait_until

pytestmark = pytest.mark.e2e

JOBS = 24
KILL_AFTER = 8


@pytest.fixture
def deployment(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    """tests/deploy/conftest.py's bare dev server and daemon starter, with Temporal giving up on a SIGKILLed
    controller after seconds: the surviving one takes over its workflows then (it waited 10 s for them)."""
    with deployed(tmp_path_factory, short_dead_controller_waits(monkeypatch)) as d:
        yield d


def test_sigkilled_controller_under_submissions_loses_no_job_and_runs_no_task_twice(deployment: Deployment) -> None:
    """Two controllers serve side by side; one is SIGKILLed mid-stream; all jobs succeed, each task ran once."""
    d = deployment.daemons
    d.controller("controller-a")
    d.controller("controller-b")
    d.worker("w1", cpu="4")
    d.worker("w2", cpu="4")
    client = IrisClient.connect(deployment.info.address, store=deployment.info.store_url)

    def healthy_workers() -> int:
        try:
            return sum(w.healthy for w in client.list_workers())
        except RPCError:  # the scheduler workflow is not started yet
            return 0

    wait_until(lambda: healthy_workers() == 2, timeout=90, what="two workers")
    for name in ("controller-a", "controller-b"):  # both polling before the stream starts
        wait_until(lambda n=name: "controller_serving" in d.log(n), timeout=60, what=f"{name} serving")
    work = d.home / "work"
    work.mkdir()

    jobs = []
    for i in range(JOBS):
        marker = work / f"job-{i}"
        script = f"echo $IRIS_TASK_ID attempt=$IRIS_ATTEMPT pid=$$ >> {marker}; sleep 1"
        jobs.append(client.submit_command(["sh", "-c", script], name=f"ha-{i}",
                                          resources=ResourceSpec(cpu=0.5, memory="64m", replicas=2)))  # fmt: skip
        if i == KILL_AFTER:
            d.kill("controller-a")
        time.sleep(0.3)

    statuses = [job.wait(timeout=240, raise_on_failure=False) for job in jobs]
    assert [JobState.SUCCEEDED] * JOBS == [s.state for s in statuses]
    for i in range(JOBS):
        ran = lines(work / f"job-{i}")
        assert 2 == len(ran), (i, ran)  # one line per task: no task lost, none run twice
        assert {f"{jobs[i].job_id}/task-0", f"{jobs[i].job_id}/task-1"} == {line.split()[0] for line in ran}
        assert all("attempt=0" in line for line in ran), ran
    assert d.procs["controller-b"].poll() is None
    assert [0] * JOBS * 2 == [t.preemption_count + t.failure_count for s in statuses for t in s.tasks]
