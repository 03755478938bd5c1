"""Sharing a fleet on a local cluster: bands evict whole lower-band gangs, credits demote, usage is charged."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris import CoschedulingConfig, IrisClient, JobState, ResourceSpec
from iris.client.iris_client import Job
from iris.config.cluster_file import parse_config
from iris.types import JobStatus, UserStatus
from tests.support import Cluster, running_cluster, wait_until

FLEET = {
    "local": {
        "worker_groups": [
            {
                "name": "slice-s",
                "count": 4,
                "resources": {"cpu": 1, "memory": "2g"},
                "attributes": {"tpu-name": "slice-s"},
                "index_attribute": "tpu-worker-id",
            },
        ]
    },
    # One credit per core-second, so a few seconds of work are a figure worth comparing.
    "sharing": {"preemption_grace": "3s", "rates": {"cpu_core_hour": 3600}, "default_credits": 10_000},
}
GANG = dict(resources=ResourceSpec(cpu=1, memory="256m", replicas=4), coscheduling=CoschedulingConfig("tpu-name"))


def victim_script(marks: Path) -> list[str]:
    """A gang member that records each start and each SIGTERM; its first attempt runs until stopped."""
    script = (
        f'd={marks}; trap \'echo term > "$d/term-$IRIS_TASK_INDEX-$IRIS_ATTEMPT"; exit 143\' TERM; '
        'echo "$$" > "$d/run-$IRIS_TASK_INDEX-$IRIS_ATTEMPT"; '
        'if [ "$IRIS_ATTEMPT" = 0 ]; then sleep 300 & wait; fi'
    )
    return ["sh", "-c", script]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("iris-sharing"), parse_config(FLEET, "sharing fleet")) as cluster:
        yield cluster


def connect(cluster: Cluster, user: str) -> IrisClient:
    return IrisClient.connect(cluster.info.address, store=cluster.info.store_url, user=user)


def user_row(client: IrisClient, user: str) -> UserStatus | None:
    return next((u for u in client.list_users() if u.user == user), None)


def charged_row(client: IrisClient, user: str) -> UserStatus | None:
    row = user_row(client, user)
    return row if row is not None and row.used > 0 else None


def demoted_status(job: Job) -> JobStatus | None:
    status = job.status()
    return status if status.effective_priority == "batch" else None


def test_an_interactive_gang_evicts_a_batch_gang_whole(shared: Cluster, tmp_path: Path) -> None:
    """Every member of the batch gang gets SIGTERM; it counts a preemption, not a failure, and runs again."""
    with connect(shared, "ana") as ana, connect(shared, "bob") as bob:
        sweep = ana.submit_command(victim_script(tmp_path), name="sweep", priority="batch", **GANG)  # type: ignore[arg-type]
        wait_until(lambda: len(list(tmp_path.glob("run-*-0"))) == 4, timeout=60, what="the batch gang runs")
        urgent = bob.submit_command(["sh", "-c", "sleep 1"], name="urgent", priority="interactive", **GANG)  # type: ignore[arg-type]
        assert JobState.SUCCEEDED == urgent.wait(timeout=90).state
        assert {f"term-{i}-0" for i in range(4)} == {p.name for p in tmp_path.glob("term-*")}
        done = sweep.wait(timeout=90)
        assert JobState.SUCCEEDED == done.state
        assert 1 == done.preemptions
        assert [0, 0, 0, 0] == [t.failure_count for t in done.tasks]
        assert ("ana", "batch", "batch") == (done.user, done.priority, done.effective_priority)
        assert {f"run-{i}-1" for i in range(4)} <= {p.name for p in tmp_path.glob("run-*")}
        assert ("bob", "interactive") == (urgent.status().user, urgent.status().priority)


def test_a_user_without_credits_runs_as_batch_and_is_preempted(shared: Cluster, tmp_path: Path) -> None:
    """carol's credits are spent: her interactive gang runs as batch, and dan's interactive gang evicts it."""
    with connect(shared, "carol") as carol, connect(shared, "dan") as dan:
        carol.set_credits("carol", 0)
        wait_until(lambda: (row := user_row(carol, "carol")) is not None and row.credits == 0, timeout=30)
        job = carol.submit_command(victim_script(tmp_path), name="notebook", **GANG)  # type: ignore[arg-type]
        wait_until(lambda: len(list(tmp_path.glob("run-*-0"))) == 4, timeout=60, what="carol's gang runs")
        demoted = wait_until(lambda: demoted_status(job), timeout=30, what="carol's job scheduled as batch")
        assert ("carol", "interactive") == (demoted.user, demoted.priority)
        other = dan.submit_command(["sh", "-c", "sleep 1"], name="dan-job", **GANG)  # type: ignore[arg-type]
        assert JobState.SUCCEEDED == other.wait(timeout=90).state
        assert {f"term-{i}-0" for i in range(4)} == {p.name for p in tmp_path.glob("term-*")}
        done = job.wait(timeout=90)
        assert JobState.SUCCEEDED == done.state
        assert 1 == done.preemptions
        assert [0, 0, 0, 0] == [t.failure_count for t in done.tasks]


SHELL_START_AND_EXIT = 0.25
"""Seconds a task's process may run beyond what its own clock readings bracket (its shell's start and exit)."""


def test_credits_charged_equal_the_jobs_resource_time(shared: Cluster, tmp_path: Path) -> None:
    """Half a core for the time the task's process ran is what eve is charged. The task writes its own start and
    end; its process ran that long and a little more (its shell's start before the first `date`, its exit after
    the last: ~10 ms on a quiet machine, 60-90 ms seen under the suite's load), never less."""
    with connect(shared, "eve") as eve:
        script = f"date +%s.%N > {tmp_path}/start; sleep 5; date +%s.%N > {tmp_path}/end"
        job = eve.submit_command(["sh", "-c", script], name="timed", resources=ResourceSpec(cpu=0.5, memory="64m"))
        assert JobState.SUCCEEDED == job.wait(timeout=60).state
        ran = float((tmp_path / "end").read_text()) - float((tmp_path / "start").read_text())
        expected = 0.5 * ran  # 3,600 credits per core-hour: one per core-second
        row = wait_until(lambda: charged_row(eve, "eve"), timeout=30, what="eve charged")
        assert expected * 0.999 <= row.used <= expected + 0.5 * SHELL_START_AND_EXIT, (row.used, expected)
        assert pytest.approx(10_000 - row.used) == row.credits
        assert (0, 0) == (row.running_tasks, row.pending_jobs)


def iris_cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "PYTHONPATH": os.pathsep.join(sys.path), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "iris", *args], capture_output=True, text=True, timeout=60, env=env)


def test_the_cli_sets_credits_and_shows_users_and_bands(shared: Cluster) -> None:
    """`iris user credits` sets a balance, `iris user list` shows it, `iris job status` shows user and bands.
    A user who never ran anything has the cluster's default credits, shown as a number."""
    fresh = iris_cli(shared, "user", "credits", "newcomer-gus")
    assert "newcomer-gus: 10,000.00 credits left, 0.00 used" in fresh.stdout, fresh.stdout + fresh.stderr
    assert 0 == iris_cli(shared, "user", "credits", "frank", "42").returncode
    # Read at once, it is there (the listing showed the old balance for a second after the command returned).
    assert "42.00" in iris_cli(shared, "user", "credits", "frank").stdout
    with connect(shared, "frank") as frank:
        job = frank.submit_command(["true"], name="quick", priority="batch", resources=ResourceSpec(cpu=0.5))
        assert JobState.SUCCEEDED == job.wait(timeout=60).state
    rows = [line.replace("│", " ").split() for line in iris_cli(shared, "user", "list").stdout.splitlines()]
    _, credits, used, running, pending = next(row for row in rows if row[:1] == ["frank"])
    assert float(credits) + float(used) == pytest.approx(42, abs=0.01)  # what ran was charged to the 42 set
    assert ("0", "0") == (running, pending)
    shown = iris_cli(shared, "job", "status", job.job_id).stdout
    assert "user: frank  band: batch  preemptions: 0" in shown
    with urllib.request.urlopen(f"{shared.info.dashboard_url}/users", timeout=30) as page:  # the dashboard's table
        assert '<tr data-user="frank">' in page.read().decode()


def test_a_user_without_credits_sees_batch_from_the_submission_on(shared: Cluster) -> None:
    """`effective_priority` said `production` until the scheduler's next pass for a user whose credits were spent,
    then `batch`; it says `batch` from the start (what the scheduler will do: the published balance)."""
    with connect(shared, "gus") as gus:
        gus.set_credits("gus", -5)
        wait_until(lambda: (row := user_row(gus, "gus")) is not None and row.credits < 0, timeout=30,
                   what="gus's balance published")  # fmt: skip
        job = gus.submit_command(["sh", "-c", "sleep 1"], name="broke", priority="production",
                                 resources=ResourceSpec(cpu=0.5, memory="64m"))  # fmt: skip
        status = job.status()
        assert ("production", "batch") == (status.priority, status.effective_priority), status.state
        assert JobState.SUCCEEDED == job.wait(timeout=60).state
