"""Per-task usage: the agent samples a task's peak memory and CPU seconds; `iris job summary` shows them."""

from __future__ import annotations

from iris import IrisClient, ResourceSpec, TaskState
from tests.ops.cli import iris
from tests.support import Cluster

MIB = 2**20
# Holds ~200 MiB (written, so resident), burns ~1 s of CPU in a child process (the task's tree, not
# only its main process, is accounted), then holds on a moment so a sample sees it all.
USER = """
import subprocess, sys, time
block = b"x" * (200 * 2**20)
subprocess.run([sys.executable, "-c",
    "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 1.0: pass"], check=True)
time.sleep(1.5)
print(len(block))
"""


def test_summary_shows_peak_memory_and_cpu_seconds_of_each_task(cluster: Cluster, client: IrisClient) -> None:
    """A task that holds 200 MiB and burns 1 s of CPU in a child: both are seen (measured: 227 MiB with the
    two interpreters, 1.16 s with their start-up), and shown per task."""
    job = client.submit_command(["python", "-c", USER], name="usage",
                                resources=ResourceSpec(cpu=1, memory="512m"))  # fmt: skip
    status = job.wait(timeout=120)
    task = status.tasks[0]
    assert task.peak_memory_bytes >= 190 * MIB, task  # the 200 MiB block, within 5%
    assert task.peak_memory_bytes < 400 * MIB, task  # the task's own tree, not the whole host
    assert task.cpu_seconds >= 0.9, task  # the child's busy second, counted once it was waited for
    assert task.duration_seconds >= 2.0, task
    result = iris(cluster, "job", "summary", job.job_id)
    assert 0 == result.returncode, result.stderr
    assert "PEAK MEMORY" in result.stdout and "CPU SECONDS" in result.stdout
    row = next(line for line in result.stdout.splitlines() if task.worker_id in line)
    assert "SUCCEEDED" in row and "Mi" in row and f"{task.cpu_seconds:.2f}" in row


def test_summary_of_an_unknown_job_is_one_line(cluster: Cluster) -> None:
    result = iris(cluster, "job", "summary", "no-such-job")
    assert 1 == result.returncode
    assert 1 == len(result.stderr.strip().splitlines()) and "no-such-job" in result.stderr


HOLD = """
import time
block = b"x" * (120 * 2**20)
print("holding", flush=True)
time.sleep(600)
"""


def test_summary_shows_a_running_tasks_usage_so_far(cluster: Cluster, client: IrisClient) -> None:
    """While a task runs, its agent's heartbeats carry its use so far: the summary shows it, marked `+`."""
    from tests.support import wait_until

    job = client.submit_command(["python", "-c", HOLD], name="holding",
                                resources=ResourceSpec(cpu=0.5, memory="512m"))  # fmt: skip
    try:
        wait_until(lambda: job.logs(0), timeout=60, what="the task holds its block")

        rows: list[str] = []

        def live_row() -> str | None:
            """The running row once it shows the block: a heartbeat sampled before the allocation shows less."""
            result = iris(cluster, "job", "summary", job.job_id)
            assert 0 == result.returncode, result.stderr
            row = next((line for line in result.stdout.splitlines() if " RUNNING " in line), "")
            rows.append(row)
            return row if "Mi+" in row and float(row.split("Mi+")[0].split()[-1]) >= 115 else None

        try:  # the 120 MiB block, resident, within a few heartbeats of the task saying it holds it
            wait_until(live_row, timeout=30, interval=1.0, what="the running task's usage so far")
        except AssertionError as err:
            raise AssertionError(f"{err}; rows seen: {rows[-3:]}") from None
        # The client's TaskStatus says the same (it read zeros while the summary showed this).
        now = client.task_status(job.job_id, 0)
        assert now.peak_memory_bytes >= 115 * 2**20 and now.duration_seconds > 0, now
        assert client.list_tasks(job.job_id)[0].peak_memory_bytes >= 115 * 2**20
    finally:
        job.terminate()
    # Killed, it keeps what it used (a cancellation carried no result: the summary showed zeros).
    killed = job.wait(timeout=60, raise_on_failure=False).tasks[0]
    assert TaskState.KILLED == killed.state, killed
    assert killed.peak_memory_bytes >= 115 * MIB and killed.duration_seconds > 0, killed
    row = next(line for line in iris(cluster, "job", "summary", job.job_id).stdout.splitlines() if " KILLED " in line)
    assert "Mi" in row and "Mi+" not in row, row


def test_a_limited_tasks_peak_counts_its_last_moment(cluster: Cluster, client: IrisClient) -> None:
    """A task in a cgroup (it asked for memory, the host enforces it) that allocates 200 MiB and exits at once:
    sampling alone would miss it; the cgroup's high-water mark, read at its end, does not."""
    import pytest

    from worker_agent.runtimes.cgroups import CgroupLimits

    if CgroupLimits.detect() is None:
        pytest.skip("no writable cgroup hierarchy on this host: process tasks get no cgroup")
    job = client.submit_command(["python", "-c", 'block = b"x" * (200 * 2**20)'], name="brief",
                                resources=ResourceSpec(cpu=1, memory="512m"))  # fmt: skip
    task = job.wait(timeout=120).tasks[0]
    assert task.peak_memory_bytes >= 190 * MIB, task
