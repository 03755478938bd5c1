"""`iris job bug-report JOB`: one Markdown file with what an issue about the job needs."""

from __future__ import annotations

from pathlib import Path

from iris import Constraint, IrisClient, ResourceSpec
from iris.client.bug_report import fenced
from tests.ops.cli import iris
from tests.support import Cluster, wait_until


def test_bug_report_of_a_failed_job_holds_request_errors_logs_workers_and_histories(
    cluster: Cluster, client: IrisClient, tmp_path: Path
) -> None:
    """The report names the command, the failed task's error and last log lines, its worker, and its history."""
    script = ('for i in $(seq 1 80); do echo line-$i; done; echo "boom in task $IRIS_TASK_INDEX"; '
              "exit $((3 * IRIS_TASK_INDEX))")
    job = client.submit_command(["sh", "-c", script], name="to-report", env={"API_TOKEN": "s3cr3t-value"},
                                resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2), max_task_failures=0)
    job.wait(timeout=60, raise_on_failure=False)
    worker = client.task_status(job.job_id, 1).worker_id
    wait_until(lambda: job.job_id in iris(cluster, "logs", "worker", worker, "--since", "1m").stdout, timeout=30,
               what="the agent's own lines about the job in the store (shipped once a second)")  # fmt: skip
    path = tmp_path / "report.md"
    result = iris(cluster, "job", "bug-report", job.job_id, "--output", str(path))
    assert 0 == result.returncode, result.stderr
    report = path.read_text()
    assert report.startswith(f"# Iris bug report: job `{job.job_id}`")
    assert "for i in $(seq 1 80)" in report and "`API_TOKEN`" in report
    assert "s3cr3t-value" not in report  # environment values never leave the cluster in a report
    assert "**FAILED**" in report
    assert "| 1 | FAILED | 0 | 1 | 0 |" in report and "exit code 3" in report
    assert "boom in task 1" in report and "line-80" in report and "line-30\n" not in report  # a tail, not all
    assert f"| {worker} | " in report and "healthy" in report
    assert f'"job_id": "{job.job_id}"' in report  # the agent's own log lines about the job
    assert f"### `{job.job_id}` (run `" in report and f"### `{job.job_id}/task-1` (run `" in report
    assert "ActivityTaskScheduled  run_task queue=iris-worker-" in report
    assert "ChildWorkflowExecutionFailed" in report or "ChildWorkflowExecutionCompleted" in report


def test_bug_report_of_an_unknown_job_is_one_line(cluster: Cluster, tmp_path: Path) -> None:
    """No such job: exit 1 with one line, and no file written."""
    path = tmp_path / "none.md"
    result = iris(cluster, "job", "bug-report", "no-such-job", "-o", str(path))
    assert 1 == result.returncode
    assert 1 == len(result.stderr.strip().splitlines()) and "no-such-job" in result.stderr
    assert not path.exists()


def test_fences_survive_backticks_in_logs() -> None:
    """A log holding ``` cannot close the code block it is shown in."""
    assert "````text\na ``` b\n````" == fenced("a ``` b\n", "text")


def test_bug_report_of_a_pending_job_says_why_it_waits(cluster: Cluster, client: IrisClient, tmp_path: Path) -> None:
    """A job no worker can take: the report gives the scheduler's reason and says no worker ran it."""
    job = client.submit_command(["true"], name="stuck", resources=ResourceSpec(cpu=0.5, memory="128m"),
                                constraints=[Constraint("pool", "EQ", "nowhere")])
    try:
        wait_until(lambda: job.status().pending_reason, timeout=30, what="a pending reason")
        result = iris(cluster, "job", "bug-report", job.job_id, "-o", "-")
    finally:
        client.terminate(job.job_id)
    assert 0 == result.returncode, result.stderr
    assert "**PENDING**" in result.stdout and "No task of this job was dispatched to a worker." in result.stdout
    waiting = next(line for line in result.stdout.splitlines() if line.startswith("**Waiting:**"))
    assert "pool=nowhere" in waiting
