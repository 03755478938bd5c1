"""`iris job logs JOB --since ... --tail N` against the real local cluster, as a user runs it."""

from __future__ import annotations

import time
from pathlib import Path

from iris import IrisClient, ResourceSpec
from tests.ops.cli import iris
from tests.support import Cluster, wait_until
from worker_agent.storage import MARK_SECONDS

SMALL = ResourceSpec(cpu=0.5, memory="256m")


def test_since_shows_only_what_was_written_after_it(cluster: Cluster, client: IrisClient, tmp_path: Path) -> None:
    """Lines written before `--since TIME` are left out; with a duration reaching back past them, all show."""
    gate = tmp_path / "go"  # the late lines are written once the test has passed the cut, whatever the load
    wait = f"while [ ! -e {gate} ]; do sleep 0.1; done"
    script = f"for i in 1 2 3; do echo early-$i; done; {wait}; echo late-1; echo late-2"
    job = client.submit_command(["sh", "-c", script], name="since", resources=SMALL)
    seen = wait_until(lambda: "early-3" in client.fetch_task_logs(job.job_id, 0) and time.time(), timeout=60)
    # `--since` knows when lines were written to within MARK_SECONDS: the cut and the late lines a mark apart.
    cut_at = seen + MARK_SECONDS + 0.5
    cut = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(cut_at)) + f".{int(cut_at % 1 * 1e6):06d}"
    wait_until(lambda: time.time() > cut_at + MARK_SECONDS + 0.5, timeout=10, what="a mark past the cut")
    gate.touch()
    job.wait(timeout=60)
    late = iris(cluster, "job", "logs", job.job_id, "--since", cut)
    assert 0 == late.returncode, late.stderr
    assert ["late-1", "late-2"] == late.stdout.splitlines()
    everything = iris(cluster, "job", "logs", job.job_id, "--since", "10m")
    assert ["early-1", "early-2", "early-3", "late-1", "late-2"] == everything.stdout.splitlines()


def test_tail_shows_the_last_lines_of_each_task(cluster: Cluster, client: IrisClient) -> None:
    """`--tail 2` prints each task's last two lines, after their task index on request."""
    job = client.submit_command(
        ["sh", "-c", "for i in 1 2 3 4; do echo t$IRIS_TASK_INDEX-$i; done"], name="tail",
        resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2),
    )
    job.wait(timeout=60)
    tail = iris(cluster, "job", "logs", job.job_id, "--tail", "2", "--prefix")
    assert 0 == tail.returncode, tail.stderr
    assert ["[0] t0-3", "[0] t0-4", "[1] t1-3", "[1] t1-4"] == tail.stdout.splitlines()
    both = iris(cluster, "job", "logs", job.job_id, "--tail", "1", "--since", "1h", "--task", "1")
    assert ["t1-4"] == both.stdout.splitlines()


def test_bad_since_and_tail_are_one_line_usage_errors(cluster: Cluster, client: IrisClient) -> None:
    """A value --since or --tail cannot take exits 2 with one line naming the option, before any lookup."""
    for args, option in [(["--since", "yesterday"], "--since"), (["--since", "-5m"], "--since"),
                         (["--tail", "-1"], "--tail"), (["--tail", "many"], "--tail")]:
        result = iris(cluster, "job", "logs", "no-such-job", *args)
        assert 2 == result.returncode, (args, result.stderr)
        assert 1 == len(result.stderr.strip().splitlines()), result.stderr
        assert option in result.stderr and "Traceback" not in result.stderr
