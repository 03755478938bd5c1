"""containerd's OOM report when the CRI gives no reason: the kernel's log decides.

containerd takes a container's `OOMKilled` reason from the runc shim's OOM watch, which starts only once `runc start`
returned, so a task OOM-killed in its first milliseconds on a stalled shim can exit as a bare 137 (the race Docker's
runtime met twice in six runs of the suite under load, tests/runtimes/test_docker_oom_event.py). Here the reason is
hidden, as then, on a real containerd.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.runtimes.test_container_runtimes import _spec, _wait_for_line
from worker_agent.runtimes import kernel_oom
from worker_agent.runtimes.containerd import ContainerdRuntime
from worker_agent.runtimes.cri import cri_runtime_v1_pb2 as cri
from worker_agent.storage import LogStore

HOG = "print('allocating', flush=True); chunks = [bytearray(16 << 20) for _ in range(32)]"
SLEEPER = "import os, time; print('pid', os.getpid()); print('up', flush=True); time.sleep(300)"


def _runtime(containerd: Any, worker_id: str) -> ContainerdRuntime:
    """A runtime that never sees the CRI's OOMKilled reason (the shim's OOM watch missed the kill)."""
    runtime = ContainerdRuntime(
        worker_id=worker_id, socket=str(containerd.socket), log_dir=containerd.base / "cri-logs" / worker_id
    )
    exited = runtime._wait_exited

    async def without_reason(container_id: str) -> cri.ContainerStatus | None:
        status = await exited(container_id)
        if status is not None:
            status.reason = "Error"  # what containerd says of a SIGKILLed container it saw no OOM for
        return status

    runtime._wait_exited = without_reason  # type: ignore[method-assign]
    return runtime


async def _run(runtime: ContainerdRuntime, log_store: LogStore, code: str, memory_bytes: int = 256 << 20) -> Any:
    try:
        handle = await runtime.start(_spec(log_store, code, memory_bytes=memory_bytes))
        return await asyncio.wait_for(runtime.wait(handle), 120)
    finally:
        await runtime.close()


async def test_an_oom_kill_the_cri_did_not_report_is_reported_from_the_kernels_log(
    containerd: Any, log_store: LogStore
) -> None:
    assert kernel_oom.kernel_records() is not None, "the kernel's log is readable here (root)"
    ended = await _run(_runtime(containerd, "w-cri-oom"), log_store, HOG, memory_bytes=64 << 20)
    assert ended.oom_killed, ended
    assert "OOM-killed: the task exceeded its memory limit of 64 MiB (ask for more memory)" == ended.reason


async def test_without_the_kernels_log_such_a_kill_is_a_plain_exit(
    containerd: Any, log_store: LogStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An agent that is not root cannot read the kernel's log, and the CRI has no OOM event to ask instead."""
    monkeypatch.setattr(kernel_oom, "KMSG", tmp_path / "no-kmsg")
    ended = await _run(_runtime(containerd, "w-cri-oom-nolog"), log_store, HOG, memory_bytes=64 << 20)
    assert (137, False) == (ended.exit_code, ended.oom_killed), ended


async def test_a_sigkill_from_outside_iris_is_not_taken_for_an_oom_kill(containerd: Any, log_store: LogStore) -> None:
    runtime = _runtime(containerd, "w-cri-outside-kill")
    try:
        handle = await runtime.start(_spec(log_store, SLEEPER))
        await _wait_for_line(log_store, "up")
        pid_line = next(line for line in log_store.read_lines("job-a", 0) if line.startswith("pid "))
        in_container = int(pid_line.split()[1])
        # The task's host pid: the container's pid namespace is the pod's, so find it by its namespaced pid.
        host_pid = next(pid for pid in _host_pids_of(handle) if _ns_pid(pid) == in_container)
        os.kill(host_pid, signal.SIGKILL)  # an operator's kill: no OOM record anywhere
        ended = await asyncio.wait_for(runtime.wait(handle), 120)
    finally:
        await runtime.close()
    assert (137, False) == (ended.exit_code, ended.oom_killed), ended


def _host_pids_of(container_id: str) -> list[int]:
    """Host pids of the processes whose cgroup names the container."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if container_id in (entry / "cgroup").read_text():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _ns_pid(pid: int) -> int:
    """The pid of host process `pid` in its innermost pid namespace."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    return pid
