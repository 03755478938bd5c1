"""`iris task exec` and `iris task profile` against a running process task on the session cluster."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris import IrisClient, Job, ResourceSpec
from tests.ops.cli import iris
from tests.support import Cluster, wait_until

SPIN = """
import os, time
print("cwd=" + os.getcwd(), flush=True)
print("cgroup=" + next(l for l in open("/proc/self/cgroup").read().splitlines() if ":memory:" in l), flush=True)
def iris_spin_here_for_the_profile():
    end = time.time() + 600
    while time.time() < end:
        sum(range(1000))
iris_spin_here_for_the_profile()
"""


@pytest.fixture
def spinning(client: IrisClient) -> Iterator[Job]:
    """A running job of two tasks, each spinning in a known function, with its own env var."""
    job = client.submit_command(["python", "-c", SPIN], name="spin", env={"ACCESS_CHECK": "seen-by-exec"},
                                resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2))  # fmt: skip
    try:
        def said_where() -> bool:
            return all(t.state == "RUNNING" for t in job.status().tasks) and all(len(job.logs(i)) >= 2 for i in (0, 1))

        wait_until(said_where, timeout=60, what="both tasks run and have said where")
        yield job
    finally:
        job.terminate()


def test_exec_sees_the_task_env_and_cwd_and_returns_the_exit_code(cluster: Cluster, spinning: Job) -> None:
    script = 'echo "var=$ACCESS_CHECK task=$IRIS_TASK_INDEX cwd=$(pwd)"; echo to-stderr >&2; exit 7'
    result = iris(cluster, "task", "exec", spinning.job_id, "--task", "1", "--", "sh", "-c", script)
    assert 7 == result.returncode, result.stderr
    task_cwd = spinning.logs(1)[0]
    assert task_cwd.startswith("cwd=/")
    assert f"var=seen-by-exec task=1 {task_cwd}" in result.stdout
    assert "to-stderr" in result.stdout  # stderr is merged into the streamed output, as in the task's log


def test_exec_runs_in_the_tasks_cgroup(cluster: Cluster, spinning: Job) -> None:
    """The task's memory limit is a cgroup on this host: the command runs in it, under the same limit."""
    task_group = spinning.logs(1)[1]
    if "/iris/task-" not in task_group:
        pytest.skip(f"the process runtime enforces no limits here (no writable cgroup hierarchy): {task_group}")
    script = 'echo "cgroup=$(grep :memory: /proc/self/cgroup)"'
    result = iris(cluster, "task", "exec", spinning.job_id, "--task", "1", "--", "sh", "-c", script)
    assert 0 == result.returncode, result.stderr
    assert task_group == result.stdout.strip()
    _record_history(cluster)


def test_exec_defaults_to_task_0_and_passes_options_through(cluster: Cluster, spinning: Job) -> None:
    result = iris(cluster, "task", "exec", spinning.job_id, "--", "sh", "-c", "echo $IRIS_TASK_INDEX -n")
    assert 0 == result.returncode, result.stderr
    assert "0 -n" == result.stdout.strip()


def test_exec_errors_are_one_line(cluster: Cluster, client: IrisClient, spinning: Job) -> None:
    unknown = iris(cluster, "task", "exec", spinning.job_id, "--task", "5", "--", "true")
    assert 1 == unknown.returncode and 1 == len(unknown.stderr.strip().splitlines())
    assert "has no task 5" in unknown.stderr
    done = client.submit_command(["true"], name="done", resources=ResourceSpec(cpu=0.1, memory="64m"))
    done.wait(timeout=60)
    ended = iris(cluster, "task", "exec", done.job_id, "--", "true")
    assert 1 == ended.returncode and f"job {done.job_id} is not running (SUCCEEDED)" in ended.stderr
    missing = iris(cluster, "task", "exec", spinning.job_id, "--", "no-such-program-here")
    assert 1 == missing.returncode and "no-such-program-here" in missing.stderr
    assert 1 == len(missing.stderr.strip().splitlines())


def test_exec_of_a_command_killed_by_a_signal_exits_128_plus_the_signal(cluster: Cluster, spinning: Job) -> None:
    """As a shell, `docker exec` and `kubectl exec` say it: 137 for SIGKILL, 143 for SIGTERM."""
    for signal_name, code in (("KILL", 137), ("TERM", 143)):
        result = iris(cluster, "task", "exec", spinning.job_id, "--", "sh", "-c", f"kill -{signal_name} $$")
        assert code == result.returncode, (signal_name, result.stderr)


def test_profile_refuses_a_bad_duration_or_output_before_sampling(
    cluster: Cluster, spinning: Job, tmp_path: Path
) -> None:
    """A usage error (exit 2) at once, not after --duration seconds of sampling."""
    zero = iris(cluster, "task", "profile", spinning.job_id, "--duration", "0")
    assert 2 == zero.returncode and "--duration must be a positive number" in zero.stderr, zero.stderr
    nowhere = iris(cluster, "task", "profile", spinning.job_id, "--duration", "30",
                   "--output", str(tmp_path / "missing" / "p.svg"))  # fmt: skip
    assert 2 == nowhere.returncode and "--output: no such directory" in nowhere.stderr, nowhere.stderr


def test_profile_writes_a_flame_graph_naming_the_spinning_function(
    cluster: Cluster, spinning: Job, tmp_path: Path
) -> None:
    svg = tmp_path / "profile.svg"
    result = iris(cluster, "task", "profile", spinning.job_id, "--task", "1", "--duration", "1", "--output", str(svg))
    assert 0 == result.returncode, result.stderr
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "iris_spin_here_for_the_profile" in text


def _record_history(cluster: Cluster) -> None:
    """With IRIS_RECORD_HISTORIES=DIR, save a TaskAccessWorkflow history there (tests/test_replay_recorded.py)."""
    record = os.environ.get("IRIS_RECORD_HISTORIES")
    if not record:
        return
    import asyncio

    from temporalio.client import Client

    async def save() -> None:
        client = await Client.connect(cluster.info.address)
        async for wf in client.list_workflows("WorkflowType = 'TaskAccessWorkflow' AND ExecutionStatus = 'Completed'"):
            history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
            fixture = {"workflow_id": wf.id, "history": json.loads(history.to_json())}
            (Path(record) / "TaskAccessWorkflow.json").write_text(json.dumps(fixture))
            return

    asyncio.run(save())


def _as_from_a_terminal() -> None:
    """Ctrl-C's default action, as in a terminal: a suite started in the background (CI's
    `cmd &`) has SIGINT ignored, and its children inherit that, so the CLI would never see it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_interrupting_exec_kills_the_command(cluster: Cluster, spinning: Job) -> None:
    """Ctrl-C on `iris task exec` cancels it: the command it ran in the task's environment is killed."""
    import signal
    import subprocess
    import sys

    import psutil

    marker = "sleep 3131"

    def running() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline"]) if " ".join(p.info["cmdline"] or []) == marker]

    cli = subprocess.Popen([sys.executable, "-m", "iris", "task", "exec", spinning.job_id, "--", "sleep", "3131"],
                           env={**cluster.env, "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, preexec_fn=_as_from_a_terminal)  # fmt: skip
    try:
        wait_until(lambda: running(), timeout=60, what="the exec'd command runs")
        cli.send_signal(signal.SIGINT)
        try:
            cli.wait(timeout=30)
        except subprocess.TimeoutExpired:
            cli.send_signal(signal.SIGABRT)  # the fault handler prints every thread's stack
            _, stderr = cli.communicate(timeout=30)
            pytest.fail(f"iris task exec still runs 30 s after Ctrl-C; its stacks:\n{stderr.decode(errors='replace')}")
        wait_until(lambda: not running(), timeout=30, what="the exec'd command is killed")
    finally:
        cli.kill()
        for p in running():
            p.kill()


def test_an_exec_command_lives_no_longer_than_the_cli_or_the_task(cluster: Cluster, spinning: Job) -> None:
    """`kill` of `iris task exec` (SIGTERM) kills the remote command as Ctrl-C does; a command whose task is
    killed dies with it, and the exec says so (as `docker exec`'s dies with its container)."""
    import signal
    import subprocess
    import sys

    import psutil

    def running(marker: str) -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline"]) if " ".join(p.info["cmdline"] or []) == marker]

    started: list[subprocess.Popen[bytes]] = []
    try:
        # Both started at once (each CLI's start is a second or more of a loaded machine's time): the second runs in
        # task 1 through the first's kill, which must leave it running.
        cli = subprocess.Popen([sys.executable, "-m", "iris", "task", "exec", spinning.job_id, "--", "sleep", "3132"],
                               env=cluster.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        started.append(cli)
        orphan = subprocess.Popen([sys.executable, "-m", "iris", "task", "exec", spinning.job_id, "--task", "1", "--",
                                   "sleep", "3133"], env=cluster.env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)  # fmt: skip
        started.append(orphan)
        wait_until(lambda: running("sleep 3132"), timeout=60, what="the exec'd command runs")
        cli.send_signal(signal.SIGTERM)
        cli.wait(timeout=30)
        wait_until(lambda: not running("sleep 3132"), timeout=30, what="the command killed with its client")

        wait_until(lambda: running("sleep 3133"), timeout=60, what="the second exec'd command runs")
        assert orphan.poll() is None, orphan.communicate()[1]  # the first one's kill left it running
        spinning.terminate()
        _, stderr = orphan.communicate(timeout=60)
        assert 1 == orphan.returncode and "ended: the command was killed with it" in stderr.decode(), stderr
        wait_until(lambda: not running("sleep 3133"), timeout=30, what="the command killed with its task")
    finally:
        for process in started:
            process.kill()
        for p in running("sleep 3132") + running("sleep 3133"):
            p.kill()
