"""Docker's OOM report when the engine's flag is not set: the kernel's log decides, or else the `oom` event.

containerd's runc shim watches a container's cgroup for OOM only once `runc start` returned, so a task OOM-killed in
its first milliseconds on a stalled shim leaves `OOMKilled` false: twice in six runs of the suite a task OOM-killed at
64 MiB was reported as a bare `exit code 137`. Here the flag is hidden (as then) on a real dockerd.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import docker
import pytest

from benchmarks.engines import PrivateDockerd
from tests.runtimes.test_container_runtimes import _spec, _wait_for_line
from worker_agent.runtimes import kernel_oom
from worker_agent.runtimes.docker import DockerRuntime
from worker_agent.storage import LogStore

HOG = "print('allocating', flush=True); chunks = [bytearray(16 << 20) for _ in range(32)]"


def _without_oom_flag(runtime: DockerRuntime) -> None:
    """The engine's inspect as it reads when containerd's OOM event did not come before the exit."""
    inspect = runtime._client.inspect_container

    def no_flag(container: str) -> dict[str, Any]:
        found: dict[str, Any] = inspect(container)
        found["State"]["OOMKilled"] = False
        return found

    runtime._client.inspect_container = no_flag  # type: ignore[method-assign,assignment]


async def _run_hog(dockerd: PrivateDockerd, log_store: LogStore, worker_id: str, event: bool = True) -> Any:
    """A 64 MiB task that allocates 512 MiB, on a runtime that never sees the flag (nor the event, unless `event`)."""
    runtime = DockerRuntime(worker_id=worker_id, docker_host=dockerd.url)
    _without_oom_flag(runtime)
    if not event:  # the shim never watched the task: no event either
        runtime._oom_event = lambda container_id: False  # type: ignore[method-assign]
    try:
        handle = await runtime.start(_spec(log_store, HOG, memory_bytes=64 << 20))
        return await asyncio.wait_for(runtime.wait(handle), 120)
    finally:
        await runtime.close()


async def test_an_oom_kill_the_engine_missed_is_reported_from_the_kernels_log(
    dockerd: PrivateDockerd, log_store: LogStore
) -> None:
    assert kernel_oom.kernel_records() is not None, "the kernel's log is readable here (root)"
    ended = await _run_hog(dockerd, log_store, "w-oom-kernel", event=False)
    assert ended.oom_killed, ended
    assert "OOM-killed: the task exceeded its memory limit of 64 MiB (ask for more memory)" == ended.reason


async def test_without_the_kernels_log_the_engines_oom_event_decides(
    dockerd: PrivateDockerd, log_store: LogStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(kernel_oom, "KMSG", tmp_path / "no-kmsg")  # an agent that is not root
    ended = await _run_hog(dockerd, log_store, "w-oom-event")
    assert ended.oom_killed, ended


async def test_a_sigkill_from_outside_iris_is_not_taken_for_an_oom_kill(
    dockerd: PrivateDockerd, log_store: LogStore
) -> None:
    runtime = DockerRuntime(worker_id="w-outside-kill", docker_host=dockerd.url)
    _without_oom_flag(runtime)
    engine = docker.APIClient(base_url=dockerd.url)
    try:
        handle = await runtime.start(_spec(log_store, "import time; print('up', flush=True); time.sleep(300)"))
        await _wait_for_line(log_store, "up")
        engine.kill(str(handle), signal="SIGKILL")  # an operator's `docker kill`: no OOM record anywhere
        ended = await asyncio.wait_for(runtime.wait(handle), 120)
    finally:
        engine.close()
        await runtime.close()
    assert not ended.oom_killed, ended
    assert 137 == ended.exit_code


def test_the_kernels_oom_records_name_the_killed_tasks_cgroup() -> None:
    """As /dev/kmsg gives them (priority, sequence, time, flags; then the text), with either cgroup driver."""
    records = [
        "6,18549,16127329004,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        "oom_memcg=/docker/abc123,task_memcg=/docker/abc123,task=python,pid=25116,uid=0\n",
        "6,18550,16127329010,-;oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/system.slice/docker-def456.scope,"
        "task_memcg=/system.slice/docker-def456.scope,task=python3,pid=4,uid=0\n",
        "3,18551,16127329019,-;Memory cgroup out of memory: Killed process 25116 (python) total-vm:82140kB\n",
        "6,18552,16127329020,-;task_memcg=/docker/not-an-oom-record\n",
    ]
    assert {"/docker/abc123", "/system.slice/docker-def456.scope"} == kernel_oom.oom_killed_cgroups(records)


def test_an_unreadable_kernel_log_says_so(tmp_path: Path) -> None:
    assert kernel_oom.oom_killed("abc123", tmp_path / "missing") is None
