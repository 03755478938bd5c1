"""Docker's OOM report when the engine's flag is not set: the container's `oom` event decides.

Docker takes a container's `OOMKilled` from containerd's OOM event as it handles the exit, and logs the `oom` event
whenever it comes. Twice in six runs of the suite a task OOM-killed at 64 MiB was reported as a bare `exit code
137`. Here the flag is hidden (as when the event came late) on a real dockerd.
"""

from __future__ import annotations

import asyncio
from typing import Any

import docker

from benchmarks.engines import PrivateDockerd
from tests.runtimes.test_container_runtimes import _spec, _wait_for_line
from worker_agent.runtimes.docker import DockerRuntime
from worker_agent.storage import LogStore


def _without_oom_flag(runtime: DockerRuntime) -> None:
    """The engine's inspect as it reads when containerd's OOM event came after the exit."""
    inspect = runtime._client.inspect_container

    def late_flag(container: str) -> dict[str, Any]:
        found: dict[str, Any] = inspect(container)
        found["State"]["OOMKilled"] = False
        return found

    runtime._client.inspect_container = late_flag  # type: ignore[method-assign,assignment]


async def test_an_oom_kill_whose_flag_came_late_is_reported_from_the_oom_event(
    dockerd: PrivateDockerd, log_store: LogStore
) -> None:
    runtime = DockerRuntime(worker_id="w-oom-event", docker_host=dockerd.url)
    _without_oom_flag(runtime)
    try:
        code = "print('allocating', flush=True); chunks = [bytearray(16 << 20) for _ in range(32)]"
        handle = await runtime.start(_spec(log_store, code, memory_bytes=64 << 20))
        ended = await asyncio.wait_for(runtime.wait(handle), 120)
    finally:
        await runtime.close()
    assert ended.oom_killed, ended
    assert "OOM-killed: the task exceeded its memory limit of 64 MiB (ask for more memory)" == ended.reason


async def test_a_sigkill_from_outside_iris_is_not_taken_for_an_oom_kill(
    dockerd: PrivateDockerd, log_store: LogStore
) -> None:
    runtime = DockerRuntime(worker_id="w-outside-kill", docker_host=dockerd.url)
    _without_oom_flag(runtime)
    engine = docker.APIClient(base_url=dockerd.url)
    try:
        handle = await runtime.start(_spec(log_store, "import time; print('up', flush=True); time.sleep(300)"))
        await _wait_for_line(log_store, "up")
        engine.kill(str(handle), signal="SIGKILL")  # an operator's `docker kill`: no oom event
        ended = await asyncio.wait_for(runtime.wait(handle), 120)
    finally:
        engine.close()
        await runtime.close()
    assert not ended.oom_killed, ended
    assert 137 == ended.exit_code
