"""The user's own code reaches the workers, and the `iris` CLI reads what the client writes."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from iris import IrisClient, JobState, ResourceSpec
from tests.support import Cluster, wait_until

SMALL = ResourceSpec(cpu=0.5, memory="256m")


@pytest.fixture
def private_module(tmp_path: Path) -> object:
    """A package that exists only on the submitter's side (a temp dir the workers never see)."""
    pkg = tmp_path / "only_here_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "maths.py").write_text(
        "from only_here_pkg.consts import BASE\n\ndef scaled(x):\n    return {'value': BASE * x, 'file': __file__}\n"
    )
    (pkg / "consts.py").write_text("BASE = 7\n")
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("only_here_pkg.maths")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("only_here_pkg")]:
            del sys.modules[name]


def test_function_from_a_module_only_the_submitter_has_runs_on_a_worker(
    client: IrisClient, private_module: object
) -> None:
    """A function from a local package the workers cannot import is shipped by value and runs."""
    job = client.submit(private_module.scaled, 6, resources=SMALL)  # type: ignore[attr-defined]
    job.wait(timeout=60)
    assert 42 == job.results()[0]["value"]


def _parent_command() -> str:
    """The command line of this task process's parent."""
    import os
    from pathlib import Path

    return Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_callables_on_a_process_worker_fork_from_its_warm_interpreter(client: IrisClient) -> None:
    """Callables are forked from the agent's forkserver (the runner imported once), not started fresh each time."""
    jobs = [client.submit(_parent_command, resources=SMALL, name=f"warm-{i}") for i in range(2)]
    parents = []
    for job in jobs:
        job.wait(timeout=60)
        parents.append(job.results()[0])
    assert all("-m worker_agent.runtimes.forkserver" in parent for parent in parents), parents


def _iris(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iris", *args], env=cluster.env, capture_output=True, text=True, timeout=120
    )


def test_cli_lists_workers_jobs_and_logs(cluster: Cluster, client: IrisClient) -> None:
    """`iris worker list`, `job list`, `job logs` and `cluster status` show the cluster's state."""
    job = client.submit_command(["sh", "-c", "echo out-$IRIS_TASK_INDEX"], name="cli-seen",
                                resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2))
    job.wait(timeout=60)
    workers = _iris(cluster, "worker", "list")
    assert 0 == workers.returncode, workers.stderr
    assert "slice-a-3" in workers.stdout and "tpu-topology=v5e-16" in workers.stdout
    def listed_succeeded() -> bool:  # the listing reads visibility, which trails a job's end a moment
        rows = _iris(cluster, "job", "list").stdout.splitlines()
        return any(job.job_id in row and "SUCCEEDED" in row for row in rows)

    wait_until(listed_succeeded, timeout=30, what=f"{job.job_id} listed SUCCEEDED")
    logs = _iris(cluster, "job", "logs", job.job_id)
    assert ["out-0", "out-1"] == logs.stdout.splitlines()  # piped: the tasks' bytes, no prefixes
    prefixed = _iris(cluster, "job", "logs", job.job_id, "--prefix")
    assert ["[0] out-0", "[1] out-1"] == prefixed.stdout.splitlines()
    one = _iris(cluster, "job", "logs", job.job_id, "--task", "1")
    assert ["out-1"] == one.stdout.splitlines()
    status = _iris(cluster, "cluster", "status")
    assert 0 == status.returncode, status.stderr
    assert "healthy of" in status.stdout and "pending tasks" in status.stdout
    assert f"Store: {cluster.info.store_url}" in status.stdout.splitlines()


def test_iris_run_exits_with_the_task_exit_code_and_kill_ends_a_job(cluster: Cluster, client: IrisClient) -> None:
    """`iris run` returns non-zero when the job fails, and `iris job kill` ends a running job KILLED."""
    failed = _iris(cluster, "run", "--cpu", "0.5", "--memory", "256m", "--", "sh", "-c", "echo bye; exit 4")
    assert 4 == failed.returncode
    assert "[0] bye" in failed.stdout
    started = _iris(cluster, "run", "--no-wait", "--cpu", "0.5", "--memory", "256m", "--", "sleep", "300")
    job_id = started.stdout.strip()
    assert 0 == _iris(cluster, "job", "kill", job_id).returncode
    assert JobState.KILLED == client.wait(job_id, timeout=60, raise_on_failure=False).state


def test_job_logs_follow_prints_until_the_job_ends(cluster: Cluster, client: IrisClient) -> None:
    """`iris job logs -f` streams lines as the task writes them and returns when the job ends."""
    script = "for i in 1 2 3; do echo tick-$i; sleep 0.6; done"
    job = client.submit_command(["sh", "-c", script], resources=SMALL)
    followed = _iris(cluster, "job", "logs", job.job_id, "-f")
    assert 0 == followed.returncode, followed.stderr
    assert ["tick-1", "tick-2", "tick-3"] == followed.stdout.splitlines()
    assert JobState.SUCCEEDED == job.status().state
    # A job that waits, then ends unplaced: the wait says why on stderr, and so does the end (it was silent). Its
    # timeout leaves the command time to start and see it wait: 4 s was once too short under load (it saw only the end).
    never = client.submit_command(["true"], resources=ResourceSpec(cpu=64, memory="64m"), scheduling_timeout=10)
    waited = _iris(cluster, "job", "logs", never.job_id, "-f")
    assert 0 == waited.returncode and "" == waited.stdout, waited.stderr
    assert "PENDING" in waited.stderr and "waiting: " in waited.stderr, waited.stderr
    assert f"{never.job_id} UNSCHEDULABLE: " in waited.stderr, waited.stderr
