"""`iris run --after/--after-rule/--max-concurrent/--if-exists`, `iris job status` and `iris schedule` on the
session cluster, as a user types them."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
import uuid

from iris import IrisClient, JobState
from tests.support import Cluster, wait_until


def iris(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "iris", *args], env=cluster.env, capture_output=True, text=True,
                          timeout=180)  # fmt: skip


def test_run_options_and_job_status_show_dependencies(cluster: Cluster, client: IrisClient) -> None:
    """A job run `--after` another with a cap shows both in `iris job status`; `--if-exists reuse` returns the
    job of that name; an unknown `--after` is one line on stderr, exit 2."""
    name = f"prep-{uuid.uuid4().hex[:6]}"
    first = iris(cluster, "run", "--name", name, "--if-exists", "reuse", "--cpu", "0.25", "--memory", "64m",
                 "--no-wait", "--", "sleep", "3")  # fmt: skip
    assert 0 == first.returncode, first.stderr
    prep = first.stdout.strip()
    again = iris(cluster, "run", "--name", name, "--if-exists", "reuse", "--no-wait", "--", "sleep", "3")
    assert prep == again.stdout.strip()
    assert f"reusing {prep}" in again.stderr and "submitted" not in again.stderr  # nothing new was submitted
    flagged = iris(cluster, "run", "--reserve", "cpu=0.5", "--reserve-constraint", "pool=", "--", "true")
    assert (2, "error: --reserve-constraint 'pool=': expected KEY=VALUE") == (flagged.returncode,
                                                                            flagged.stderr.strip())  # fmt: skip
    second = iris(cluster, "run", "--after", prep, "--after-rule", "ended", "--max-concurrent", "2", "--replicas",
                  "3", "--cpu", "0.25", "--memory", "64m", "--no-wait", "--", "true")  # fmt: skip
    assert 0 == second.returncode, second.stderr
    job_id = second.stdout.strip()
    shown = iris(cluster, "job", "status", job_id).stdout
    assert f"after: {prep} (after_rule=ended)" in shown
    assert "max_concurrent: 2 tasks placed at a time" in shown
    assert JobState.SUCCEEDED == client.wait(job_id, timeout=120).state
    page = urllib.request.urlopen(f"{cluster.info.dashboard_url}/jobs/{job_id}", timeout=30).read().decode()
    assert f'<a href="/jobs/{prep}">{prep}</a> (after_rule=ended)' in page  # the dashboard links the dependency
    assert "2 tasks placed at a time" in page
    bad = iris(cluster, "run", "--after", "no-such-job-9", "--no-wait", "--", "true")
    assert (2, "error: --after[0]: no such job: no-such-job-9") == (bad.returncode, bad.stderr.strip())
    rule = iris(cluster, "run", "--after", prep, "--after-rule", "afterok", "--", "true")
    assert 2 == rule.returncode and rule.stderr.startswith("error: --after-rule must be one of succeeded, ended")


def test_schedule_commands(cluster: Cluster, client: IrisClient) -> None:
    """create, list, pause, unpause, trigger, jobs and delete, each one command (the dashboard lists the schedule
    too); errors are one line, exit 2."""
    name = f"cli-{uuid.uuid4().hex[:6]}"
    made = iris(cluster, "schedule", "create", name, "--cron", "0 3 * * *", "--timezone", "Asia/Tokyo",
                "--cpu", "0.25", "--memory", "64m", "--max-preemptions", "3", "--port", "http",
                "--", "sh", "-c", "echo nightly on port ${IRIS_PORT_HTTP:+set}")  # fmt: skip  # `iris run`'s options
    assert 0 == made.returncode, made.stderr
    try:
        listed = iris(cluster, "schedule", "list").stdout
        assert name in listed and "Asia/Tokyo" in listed and "active" in listed
        page = urllib.request.urlopen(f"{cluster.info.dashboard_url}/schedules", timeout=30).read().decode()
        assert f'<tr data-schedule="{name}">' in page and "Asia/Tokyo" in page  # the dashboard lists it
        assert 0 == iris(cluster, "schedule", "pause", name).returncode
        assert client.schedule(name).status().paused
        assert 0 == iris(cluster, "schedule", "unpause", name).returncode
        assert not client.schedule(name).status().paused
        assert 0 == iris(cluster, "schedule", "trigger", name).returncode
        wait_until(lambda: len(client.schedule(name).jobs()) == 1, timeout=60, what="the triggered job")
        (job,) = client.schedule(name).jobs()
        job.wait(timeout=120)
        assert ["nightly on port set"] == job.logs()
        assert job.job_id in iris(cluster, "schedule", "jobs", name).stdout
        twice = iris(cluster, "schedule", "create", name, "--cron", "0 3 * * *", "--", "true")
        assert (2, f"error: NAME: a schedule named '{name}' exists (delete it first)") == (
            twice.returncode,
            twice.stderr.strip(),
        )
    finally:
        assert 0 == iris(cluster, "schedule", "delete", name).returncode
    gone = iris(cluster, "schedule", "pause", name)
    assert gone.returncode != 0 and gone.stderr.strip().endswith(f"no such schedule: {name}")
