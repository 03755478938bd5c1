"""`task exec` and `task profile` inside a container task, on each real engine (Docker, containerd's CRI).

The agent's activities run here through Temporal's ActivityEnvironment (heartbeats and all) against
a task the runtime really started: the command runs in the task's container, sees its environment
and working directory, and its exit code comes back; py-spy samples the container's Python from the host.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from activities.contracts import EXEC_IN_TASK, PROFILE_TASK, TaskAccessInput, profile_blob_key, task_access_log_url
from benchmarks.engines import PYTHON_IMAGE
from worker_agent.runtimes.base import ContainerRuntime, Mount, TaskHandle, TaskSpec
from worker_agent.storage import BlobStore, LogStore
from worker_agent.task_access import RunningTasks, TaskAccess

PY = "/usr/local/bin/python3"
SPIN = """
import time
def iris_spin_in_a_container():
    while True:
        sum(range(1000))
print("spinning", flush=True)
iris_spin_in_a_container()
"""

# Run by exec in the task's container: its env, its cwd, and the processes it sees.
PEEK = """
import os, sys
pids = [p for p in os.listdir("/proc") if p.isdigit()]
def cmdline(p):
    try:
        return open(f"/proc/{p}/cmdline", "rb").read()
    except OSError:
        return b""
print(f"var={os.environ['ACCESS_CHECK']} cwd={os.getcwd()}")
print("sees the task:", any(b"iris_spin_in_a_container" in cmdline(p) for p in pids))
print("processes:", len(pids))
sys.exit(5)
"""


async def _started(runtime: ContainerRuntime, logs: LogStore, work: Path) -> tuple[TaskHandle, TaskSpec]:
    spec = TaskSpec(argv=[PY, "-c", SPIN], log=logs.open_writer("job-x", 0, 0), image=PYTHON_IMAGE,
                    job_id="job-x", env={"ACCESS_CHECK": "in-the-container"}, cwd=str(work),
                    mounts=[Mount(str(work), read_only=False)])  # fmt: skip
    handle = await runtime.start(spec)
    deadline = time.monotonic() + 60
    while "spinning" not in logs.read_lines("job-x", 0):
        assert time.monotonic() < deadline, logs.read_lines("job-x", 0)
        await asyncio.sleep(0.05)
    return handle, spec


async def test_exec_and_profile_inside_the_task_container(engine_runtime: ContainerRuntime, tmp_path: Path) -> None:
    store = tmp_path / "store"
    logs = LogStore.from_url(str(tmp_path / "task-logs"))
    work = tmp_path / "work"
    work.mkdir()
    handle, spec = await _started(engine_runtime, logs, work)
    running: RunningTasks = {("job-x", 0): (handle, 0, spec)}
    blobs = BlobStore.from_url(str(store))
    access = TaskAccess(engine_runtime, running, blobs, str(store))
    try:
        inp = TaskAccessInput(activity=EXEC_IN_TASK, access_id="exec-1", job_id="job-x", task_index=0,
                              worker_id="w", argv=[PY, "-c", PEEK])  # fmt: skip
        result = await ActivityEnvironment().run(access.exec_in_task, inp)
        output = LogStore.from_url(task_access_log_url(str(store))).read_bytes("exec-1", 0).decode()
        assert 5 == result.exit_code, result
        assert f"var=in-the-container cwd={work}" in output
        assert "sees the task: True" in output  # its pid namespace: the task's processes, not the host's
        assert int(output.split("processes: ")[1].split()[0]) < 20, output

        inp = TaskAccessInput(activity=PROFILE_TASK, access_id="prof-1", job_id="job-x", task_index=0,
                              worker_id="w", duration_seconds=2)  # fmt: skip
        result = await ActivityEnvironment().run(access.profile_task, inp)
        spy_said = LogStore.from_url(task_access_log_url(str(store))).read_lines("prof-1", 0)
        assert 0 == result.exit_code, (result, spy_said)
        assert "iris_spin_in_a_container" in blobs.get(profile_blob_key("prof-1")).decode()

        missing = TaskAccessInput(activity=EXEC_IN_TASK, access_id="exec-2", job_id="job-x", task_index=1,
                                  worker_id="w", argv=["true"])  # fmt: skip
        result = await ActivityEnvironment().run(access.exec_in_task, missing)
        assert -1 == result.exit_code and "task 1 of job job-x is not running" in result.error
    finally:
        await engine_runtime.kill(handle, grace_seconds=0)
