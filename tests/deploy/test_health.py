"""`/health` and `/metrics` of a controller and an agent, against a real Temporal, answering as it changes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from iris import IrisClient, ResourceSpec
from tests.deploy.conftest import Deployment, free_port, get, health
from tests.support import wait_until

pytestmark = pytest.mark.e2e


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in Prometheus text, or None if absent."""
    label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{re.escape(name)}{{{re.escape(label_text)}}} (\S+)$" if labels else rf"^{re.escape(name)} (\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else None


def test_health_and_metrics_follow_the_daemons_and_temporal(deployment: Deployment) -> None:
    """Both daemons answer 200 with their checks; metrics count the job's work; without Temporal, 503."""
    d = deployment.daemons
    controller_port, worker_port = free_port(), free_port()
    d.controller("controller", controller_port)
    d.worker("w1", worker_port)
    ok_checks = {"temporal_reachable": True, "pollers_running": True}
    controller_checks = {**ok_checks, "scheduler_workflow_task_ok": True}
    for port, checks in ((controller_port, controller_checks), (worker_port, ok_checks)):
        _, body = wait_until(lambda p=port: (s := health(p))[0] == 200 and s, timeout=90, what="health 200")
        assert {"status": "ok", "checks": checks} == body

    client = IrisClient.connect(deployment.info.address, store=deployment.info.store_url)
    ok = client.submit_command(["python", "-c", "print(1)"], name="fine", resources=ResourceSpec(cpu=0.5))
    bad = client.submit_command(["python", "-c", "raise SystemExit(3)"], name="bad", resources=ResourceSpec(cpu=0.5))
    ok.wait(timeout=120)
    bad.wait(timeout=120, raise_on_failure=False)

    def both_counted() -> str | None:  # by state, from Temporal visibility, which lags a job's end a moment
        _, text = get(f"http://127.0.0.1:{controller_port}/metrics")
        counted = [metric(text, "iris_jobs", state=state) or 0 for state in ("SUCCEEDED", "FAILED")]
        return text if min(counted) >= 1 else None

    controller_metrics = wait_until(both_counted, timeout=30, what="iris_jobs counting both jobs")
    assert 0 == metric(controller_metrics, "iris_pending_tasks")
    assert 1 == metric(controller_metrics, "iris_workers", healthy="true")
    assert 1 <= (metric(controller_metrics, "iris_scheduling_pass_seconds_count") or 0)
    assert re.search(r"^temporal_\w+", controller_metrics, re.MULTILINE), "the SDK's own metrics are appended"

    _, worker_metrics = get(f"http://127.0.0.1:{worker_port}/metrics")
    assert 2 == metric(worker_metrics, "iris_tasks_started_total")
    assert 1 == metric(worker_metrics, "iris_tasks_finished_total", outcome="succeeded")
    assert 1 == metric(worker_metrics, "iris_tasks_finished_total", outcome="failed")
    assert 1 <= (metric(worker_metrics, "iris_worker_heartbeats_total") or 0)

    deployment.local.kill_process("temporal", signal.SIGKILL, wait=10)
    for port in (controller_port, worker_port):
        _, body = wait_until(lambda p=port: (s := health(p))[0] == 503 and s, timeout=60, what="health 503")
        assert "unavailable" == body["status"]
        assert {"temporal_reachable": False} == {"temporal_reachable": body["checks"]["temporal_reachable"]}


def test_daemons_that_cannot_reach_temporal_answer_503(tmp_path: Path) -> None:
    """A controller and an agent started while Temporal is unreachable serve /health with 503 and say why (their
    ports refused connections until Temporal answered, which a probe reads as a dead process)."""
    nowhere = f"127.0.0.1:{free_port()}"  # nothing listens there
    store = (tmp_path / "store").as_uri()
    env = {**os.environ, "IRIS_HOME": str(tmp_path / "home")}
    controller_port, worker_port = free_port(), free_port()
    commands = [
        ["controller", "serve", "--temporal", nowhere, "--store", store, "--health-port", str(controller_port)],
        ["worker", "serve", "--temporal", nowhere, "--store", store, "--worker-id", "lonely", "--cpu", "0.25",
         "--memory", "256m", "--task-user", "", "--health-port", str(worker_port)],
    ]  # fmt: skip
    daemons = [subprocess.Popen([sys.executable, "-m", "iris", *args], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True) for args in commands]  # fmt: skip
    try:
        for port in (controller_port, worker_port):
            _, body = wait_until(lambda p=port: (s := health(p))[0] == 503 and s, timeout=60, what="health 503")
            assert ("unavailable", False) == (body["status"], body["checks"]["temporal_reachable"])
            assert 200 == get(f"http://127.0.0.1:{port}/metrics")[0]
    finally:
        for daemon in daemons:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=30)
