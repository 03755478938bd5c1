"""Jobs on a real local cluster: identity, results, logs, retries, failure and kill semantics."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from activities.contracts import STOP_TASK, StopTask, task_workflow_ids, worker_task_queue
from iris import (
    Constraint,
    CoschedulingConfig,
    IrisClient,
    JobFailedError,
    JobState,
    ResourceSpec,
    TaskState,
    get_job_info,
)
from iris.config.cluster_file import LocalWorkerSpec
from tests.support import Cluster, pid_gone, wait_until
from worker_agent.runtimes.cgroups import CgroupLimits

SMALL = ResourceSpec(cpu=0.5, memory="256m")


def whoami(tag: str) -> dict[str, object]:
    info = get_job_info()
    assert info is not None
    return {
        "tag": tag,
        "task_index": info.task_index,
        "num_tasks": info.num_tasks,
        "env_index": os.environ["IRIS_TASK_INDEX"],
        "env_num": os.environ["IRIS_NUM_TASKS"],
        "job_id": info.job_id,
        "attempt": info.attempt,
    }


def test_four_replicas_see_their_identity_and_return_values(client: IrisClient) -> None:
    """A 4-replica callable job: each task sees its own index and the job's size, and returns a value."""
    job = client.submit(whoami, "hi", resources=ResourceSpec(cpu=0.5, memory="256m", replicas=4))
    status = job.wait(timeout=60)
    assert JobState.SUCCEEDED == status.state
    results = job.results()
    assert [0, 1, 2, 3] == [r["task_index"] for r in results]
    assert ["0", "1", "2", "3"] == [r["env_index"] for r in results]
    assert {4} == {r["num_tasks"] for r in results}
    assert {"4"} == {r["env_num"] for r in results}
    assert {job.job_id} == {r["job_id"] for r in results}
    assert {"hi"} == {r["tag"] for r in results}


def test_logs_are_streamed_while_running_and_kept_after(client: IrisClient) -> None:
    """Each task's output can be read while it runs and in full after the job ends."""
    script = "import sys,time\nfor i in range(3):\n print('line', i, flush=True); time.sleep(0.7)\n"
    job = client.submit_command(
        [sys.executable, "-c", script], resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2)
    )
    early = wait_until(lambda: client.fetch_task_logs(job.job_id, 1), timeout=30)
    assert "line 0" == early[0]
    # The task writes before its agent's "started" reaches the job: the job is seen RUNNING a moment later.
    wait_until(lambda: job.status().state == JobState.RUNNING, timeout=30, interval=0.05, what="the job running")
    job.wait(timeout=60)
    for index in (0, 1):
        assert ["line 0", "line 1", "line 2"] == client.fetch_task_logs(job.job_id, index)
    # A task the job does not have, or a job that does not exist, is said so (both read as []).
    with pytest.raises(ValueError, match="task_index must be between 0 and 1, got 2"):
        client.fetch_task_logs(job.job_id, 2)
    with pytest.raises(KeyError, match="no-such-job"):
        client.fetch_task_logs("no-such-job", 0)


def test_constraint_only_one_group_satisfies(client: IrisClient) -> None:
    """Tasks constrained to tpu-worker-id >= 2 land only on slice hosts 2 and 3."""
    job = client.submit_command(
        ["true"],
        resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2),
        constraints=[Constraint("tpu-name", "EQ", "slice-a"), Constraint("tpu-worker-id", "GE", 2)],
    )
    job.wait(timeout=60)
    assert {"slice-a-2", "slice-a-3"} >= {t.worker_id for t in client.list_tasks(job.job_id)}


def test_coscheduled_job_places_task_i_on_tpu_worker_id_i(client: IrisClient) -> None:
    """A coscheduled 4-task v5e-16 job runs on the slice with task i on the host with tpu-worker-id i."""
    job = client.submit_command(
        ["true"],
        resources=ResourceSpec(cpu=1, memory="1g", replicas=4),
        constraints=[Constraint("tpu-topology", "EQ", "v5e-16")],
        coscheduling=CoschedulingConfig(group_by="tpu-name"),
    )
    job.wait(timeout=60)
    assert [f"slice-a-{i}" for i in range(4)] == [t.worker_id for t in client.list_tasks(job.job_id)]


def test_coscheduled_job_waits_while_no_slice_has_enough_free_hosts(client: IrisClient, tmp_path: Path) -> None:
    """While one slice host is busy, a whole-slice gang stays pending with a reason, then runs."""
    gate = tmp_path / "go"  # the blocker holds its host until the test has seen the gang wait
    blocker = client.submit_command(
        ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"],
        resources=ResourceSpec(cpu=1, memory="1g"),
        constraints=[Constraint("tpu-worker-id", "EQ", 3)],
    )
    wait_until(lambda: blocker.status().state == JobState.RUNNING)
    gang = client.submit_command(
        ["true"],
        resources=ResourceSpec(cpu=1, memory="1g", replicas=4),
        constraints=[Constraint("tpu-topology", "EQ", "v5e-16")],
        coscheduling=CoschedulingConfig(group_by="tpu-name"),
    )
    status = wait_until(lambda: (s := gang.status()).pending_reason and s)
    assert JobState.PENDING == status.state
    assert "tpu-name" in status.pending_reason
    gate.touch()
    assert JobState.SUCCEEDED == gang.wait(timeout=60).state


def test_failing_task_is_retried_then_fails_the_job_with_exit_code(client: IrisClient) -> None:
    """A task that always exits 3 runs 1 + max_retries_failure times, then the job fails with exit code 3."""
    job = client.submit_command(
        ["sh", "-c", "echo attempt $IRIS_ATTEMPT; exit 3"], resources=SMALL, max_retries_failure=2
    )
    with pytest.raises(JobFailedError) as failed:
        job.wait(timeout=60)
    status = failed.value.status
    assert JobState.FAILED == status.state
    task = status.tasks[0]
    assert (TaskState.FAILED, 3, 3, 2) == (task.state, task.failure_count, task.exit_code, task.attempt)
    assert "exit code 3" in status.error
    assert ["attempt 0", "attempt 1", "attempt 2"] == client.fetch_task_logs(job.job_id, 0)


def test_callable_exception_is_reported(client: IrisClient) -> None:
    """An exception in a shipped function fails the task with the exception's type and message."""

    def boom() -> None:
        raise ValueError("bad shard 7")

    job = client.submit(boom, resources=SMALL)
    status = job.wait(timeout=60, raise_on_failure=False)
    assert JobState.FAILED == status.state
    assert "ValueError: bad shard 7" in status.tasks[0].error


def test_a_callable_that_ends_its_process_early_fails_saying_so(client: IrisClient) -> None:
    """`os._exit(0)` before returning left a SUCCEEDED job whose results() raised a missing-blob error;
    `sys.exit(3)` exited 1 while its error said 3."""

    def vanish() -> int:
        os._exit(0)

    def leave(code: int) -> None:
        sys.exit(code)

    gone = client.submit(vanish, resources=SMALL).wait(timeout=60, raise_on_failure=False)
    assert JobState.FAILED == gone.state, gone
    assert "exited 0 before its function returned" in gone.tasks[0].error
    left = client.submit(leave, 3, resources=SMALL).wait(timeout=60, raise_on_failure=False)
    assert (JobState.FAILED, 3) == (left.state, left.tasks[0].exit_code), left
    assert "sys.exit(3)" in left.tasks[0].error


def test_coscheduled_failure_kills_siblings(client: IrisClient, tmp_path: Path) -> None:
    """When task 0 of a gang exits 1, its sleeping siblings' processes are killed and the job fails fast."""
    script = (
        f'echo $$ > {tmp_path}/pid-$IRIS_TASK_INDEX; '
        'if [ "$IRIS_TASK_INDEX" = 0 ]; then sleep 2; exit 1; fi; sleep 300'
    )
    job = client.submit_command(
        ["sh", "-c", script],
        resources=ResourceSpec(cpu=1, memory="1g", replicas=4),
        coscheduling=CoschedulingConfig(group_by="tpu-name"),
    )
    wait_until(lambda: len(list(tmp_path.glob("pid-*"))) == 4, timeout=30)
    started = time.monotonic()
    status = job.wait(timeout=60, raise_on_failure=False)
    assert JobState.FAILED == status.state
    assert time.monotonic() - started < 10
    assert [TaskState.FAILED, TaskState.KILLED, TaskState.KILLED, TaskState.KILLED] == [
        t.state for t in status.tasks
    ]
    assert ["killed: task 0 failed: exit code 1"] * 3 == [t.error for t in status.tasks[1:]]  # it said "killed"
    for i in (1, 2, 3):
        assert pid_gone(int((tmp_path / f"pid-{i}").read_text()))


def test_terminate_kills_running_tasks(client: IrisClient, tmp_path: Path) -> None:
    """terminate() stops every running task process and the job ends KILLED."""
    job = client.submit_command(
        ["sh", "-c", f"echo $$ > {tmp_path}/pid-$IRIS_TASK_INDEX; sleep 300"],
        resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2),
    )
    wait_until(lambda: len(list(tmp_path.glob("pid-*"))) == 2, timeout=30)
    job.terminate()
    status = job.wait(timeout=30, raise_on_failure=False)
    assert JobState.KILLED == status.state
    assert [TaskState.KILLED, TaskState.KILLED] == [t.state for t in status.tasks]
    for i in (0, 1):
        assert pid_gone(int((tmp_path / f"pid-{i}").read_text()))


def test_a_kill_reaches_the_agent_on_its_own_queue(client: IrisClient, tmp_path: Path) -> None:
    """A killed task's workflow sends its agent a `stop_task` (a kill) beside the cancellation, which the agent
    would hear of only with its next heartbeat (every 3 s): `iris job kill` stops a task's process at once."""
    job = client.submit_command(["sh", "-c", f"echo $$ > {tmp_path}/pid; sleep 300"], resources=SMALL)
    wait_until(lambda: (tmp_path / "pid").exists(), timeout=30, what="the task's process runs")
    job.terminate()
    assert TaskState.KILLED == job.wait(timeout=30, raise_on_failure=False).tasks[0].state
    assert pid_gone(int((tmp_path / "pid").read_text()))

    async def stops() -> list[dict[str, object]]:
        handle = client._async.temporal.get_workflow_handle(next(task_workflow_ids(job.job_id, [0])))
        converter = client._async.temporal.data_converter
        sent = []
        async for event in handle.fetch_history_events():
            scheduled = event.activity_task_scheduled_event_attributes
            if event.HasField("activity_task_scheduled_event_attributes") and scheduled.activity_type.name == STOP_TASK:
                (stop,) = await converter.decode(scheduled.input.payloads, [StopTask])
                sent.append({"attempt": stop.attempt, "kill": stop.kill, "queue": scheduled.task_queue.name})
        return sent

    worker = job.status().tasks[0].worker_id
    assert [{"attempt": 0, "kill": True, "queue": worker_task_queue(worker)}] == client._run(stops())


def test_a_killed_task_that_exits_0_on_its_sigterm_is_killed_not_succeeded(client: IrisClient, tmp_path: Path) -> None:
    """A task that handles SIGTERM by exiting 0 was stopped by the kill: KILLED, as its job (it read SUCCEEDED)."""
    script = f"trap 'exit 0' TERM; echo $$ > {tmp_path}/pid; sleep 300 & wait"
    job = client.submit_command(["sh", "-c", script], resources=SMALL)
    wait_until(lambda: (tmp_path / "pid").exists(), timeout=30, what="the task's process runs")
    job.terminate()
    status = job.wait(timeout=30, raise_on_failure=False)
    assert (JobState.KILLED, TaskState.KILLED) == (status.state, status.tasks[0].state), status


def test_terminate_stops_a_crash_looping_task(client: IrisClient) -> None:
    """A kill that reaches a task as an attempt fails on its own ends the task: it was counted as that
    attempt's failure and the task retried until its budget was spent (the job stayed RUNNING)."""
    job = client.submit_command(["sh", "-c", "sleep 1; exit 5"], resources=SMALL, max_retries_failure=1000)

    def running_again() -> bool:
        task = client.task_status(job.job_id, 0)
        return task.attempt >= 1 and task.state == TaskState.RUNNING

    wait_until(running_again, timeout=60, interval=0.1, what="the task running again")  # the kill lands mid-attempt
    job.terminate()
    status = job.wait(timeout=30, raise_on_failure=False)
    assert (JobState.KILLED, TaskState.KILLED) == (status.state, status.tasks[0].state), status
    assert status.tasks[0].attempt < 20, status.tasks[0]


def test_scheduling_timeout_makes_job_unschedulable(client: IrisClient) -> None:
    """A job no worker can hold becomes UNSCHEDULABLE once its scheduling timeout passes."""
    job = client.submit_command(["true"], resources=ResourceSpec(cpu=64, memory="1g"), scheduling_timeout=1.5)
    status = job.wait(timeout=30, raise_on_failure=False)
    assert JobState.UNSCHEDULABLE == status.state
    assert TaskState.UNSCHEDULABLE == status.tasks[0].state
    assert "cpu" in status.error


def test_pending_job_shows_reason_and_runs_when_a_worker_registers(cluster: Cluster, client: IrisClient) -> None:
    """`iris run` shows why its job waits, `iris job status` too, and the job runs once a fitting worker joins."""
    run = subprocess.Popen(
        [sys.executable, "-m", "iris", "run", "--name", "late", "-c", "pool=late", "--cpu", "0.5",
         "--memory", "256m", "--", "echo", "ran on the late worker"],
        env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert run.stderr is not None
        submitted = run.stderr.readline()
        while "submitted" not in submitted:
            submitted = run.stderr.readline()
        job_id = submitted.split()[-1]
        waiting = run.stderr.readline()
        while "waiting:" not in waiting:
            waiting = run.stderr.readline()
        assert "pool=late" in waiting
        shown = subprocess.run(
            [sys.executable, "-m", "iris", "job", "status", job_id],
            env=cluster.env, capture_output=True, text=True, timeout=60,
        )
        assert "PENDING" in shown.stdout
        assert "pool=late" in shown.stdout
        cluster.local.start_worker(
            LocalWorkerSpec(worker_id="late-0", cpu_millis=1000, memory_bytes=2**30, attributes={"pool": "late"})
        )
        stdout, _ = run.communicate(timeout=60)
        assert 0 == run.returncode
        assert "[0] ran on the late worker" in stdout
    finally:
        run.kill()
        cluster.local.stop_worker("late-0")


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"constraints": ["zone=us"]}, "constraints"),
        ({"resources": ResourceSpec(replicas=3), "constraints": [Constraint("tpu-topology", "EQ", "v5e-16")],
          "coscheduling": CoschedulingConfig("tpu-name")}, "replicas"),
        ({"env": {"IRIS_TASK_INDEX": "9"}}, "env"),
        ({"resources": ResourceSpec(replicas=100_001)}, "replicas"),
        ({"max_retries_failure": -1}, "max_retries_failure"),
        ({"scheduling_timeout": -5}, "scheduling_timeout"),
    ],
)
def test_bad_submission_options_raise_and_start_nothing(client: IrisClient, options: dict, field: str) -> None:
    """Invalid submissions raise ValueError naming the field, and no job is created."""
    before = {j.job_id for j in client.list_jobs()}
    with pytest.raises(ValueError, match=field):
        client.submit_command(["true"], **options)
    assert before == {j.job_id for j in client.list_jobs()}


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Constraint("zone", "SORTA", "x"), "op"),
        (lambda: Constraint("zone", "GT", "us"), "GT"),
        (lambda: ResourceSpec(replicas=0), "replicas"),
        (lambda: ResourceSpec(memory="lots"), "memory"),
        (lambda: ResourceSpec(cpu=-1), "cpu"),
    ],
)
def test_bad_values_raise_naming_the_field(build, field: str) -> None:  # type: ignore[no-untyped-def]
    """Unknown ops, replicas < 1 and unparseable sizes are ValueErrors that name the field."""
    with pytest.raises(ValueError, match=field):
        build()


def test_temporal_ui_can_filter_jobs_by_state_and_name(client: IrisClient) -> None:
    """The job's search attributes follow its state, so `IrisJobState="SUCCEEDED"` finds it in the UI."""
    job = client.submit_command(["true"], name="ui-filter-me", resources=SMALL)
    job.wait(timeout=60)

    async def ids(query: str) -> set[str]:
        return {wf.id async for wf in client._async.temporal.list_workflows(query)}

    def found() -> bool:
        query = 'IrisJobState="SUCCEEDED" AND IrisJobName="ui-filter-me"'
        return job.job_id in client._run(ids(query))

    wait_until(found, timeout=20)
    assert job.job_id not in client._run(ids('IrisJobState="RUNNING"'))


@pytest.mark.skipif(CgroupLimits.detect() is None, reason="no writable cgroup hierarchy (agents not root)")
def test_a_process_task_over_its_memory_fails_saying_so(client: IrisClient) -> None:
    """A host-process task allocating past its 64 MiB request is OOM-killed; the job fails with that reason."""
    hog = "chunks = [bytearray(16 << 20) for _ in range(32)]"
    job = client.submit_command([sys.executable, "-c", hog], resources=ResourceSpec(cpu=0.5, memory="64m"))
    status = job.wait(timeout=120, raise_on_failure=False)
    assert JobState.FAILED == status.state
    (task,) = client.list_tasks(job.job_id)
    assert "OOM-killed: the task exceeded its memory limit of 64 MiB (ask for more memory)" in task.error, task


def _sleeps(argument: str) -> list[int]:
    """Pids of live `sleep <argument>` processes on this host."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdecimal():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if cmdline == f"sleep\0{argument}\0".encode() and not pid_gone(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(CgroupLimits.detect() is None, reason="no writable cgroup hierarchy (agents not root)")
@pytest.mark.parametrize(("then", "argument"), [("sleep 1", "3119"), ("sleep 300", "3120")])
def test_a_process_tasks_setsid_processes_end_with_it(client: IrisClient, then: str, argument: str) -> None:
    """`setsid sleep &` in a task that succeeds, or is killed, is not left running once the job ends."""
    script = f"setsid sleep {argument} & {then}"
    job = client.submit_command(["sh", "-c", script], name="esc", resources=ResourceSpec(cpu=0.25, memory="256m"))
    try:
        wait_until(lambda: _sleeps(argument), timeout=60, what=f"the task starts sleep {argument}")
        if then == "sleep 300":
            job.terminate()
            assert JobState.SUCCEEDED != job.wait(timeout=60, raise_on_failure=False).state
        else:
            assert JobState.SUCCEEDED == job.wait(timeout=60).state
        wait_until(lambda: not _sleeps(argument), timeout=10, what=f"sleep {argument} ends with its task")
    finally:
        for pid in _sleeps(argument):
            os.kill(pid, 9)
