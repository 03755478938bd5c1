"""Each container runtime against its real engine: isolation, logs, limits, kill and recovery.

The same tests run for Docker and for containerd (CRI); the engines are private ones started by
the session (see conftest.py), the image is this interpreter in a minimal root filesystem.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from activities.contracts import LEASE_EXPIRED_REASON
from benchmarks.engines import PYTHON_IMAGE
from tests.runtimes.conftest import make_engine_runtime
from worker_agent.runtimes.base import ContainerRuntime, LeasedRuntime, Mount, TaskExit, TaskSpec, TaskStartError
from worker_agent.storage import LogStore

PY = "/usr/local/bin/python3"


def _spec(log_store: LogStore, code: str, *, attempt: int = 0, **kwargs: object) -> TaskSpec:
    return TaskSpec(
        argv=[PY, "-c", code],
        log=log_store.open_writer("job-a", 0, attempt),
        image=PYTHON_IMAGE,
        job_id="job-a",
        task_index=0,
        attempt=attempt,
        worker_id=kwargs.pop("worker_id", ""),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


async def _wait_for_line(log_store: LogStore, line: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while line not in log_store.read_lines("job-a", 0):
        assert time.monotonic() < deadline, f"{line!r} never appeared in the log: {log_store.read_lines('job-a', 0)}"
        await asyncio.sleep(0.05)


async def test_task_runs_in_a_container_that_sees_only_its_own_paths(
    engine_runtime: ContainerRuntime, log_store: LogStore, tmp_path: Path
) -> None:
    """The task's cgroup is its container's; its mounted area is writable; other host paths do not exist."""
    area = tmp_path / "area"
    area.mkdir()
    secret = tmp_path / "other-job-secret"
    secret.write_text("not yours")
    code = (
        "import os, pathlib;"
        "print('cgroup', open('/proc/self/cgroup').read().replace(chr(10), ' '));"
        f"pathlib.Path({str(area)!r}, 'out').write_text('written inside');"
        f"print('secret visible', os.path.exists({str(secret)!r}));"
        "print('env', os.environ['IRIS_TASK_ID'])"
    )
    spec = _spec(log_store, code, env={"IRIS_TASK_ID": "job-a/task-0"}, mounts=[Mount(str(area), read_only=False)])
    handle = await engine_runtime.start(spec)
    ended = await asyncio.wait_for(engine_runtime.wait(handle), 120)
    spec.log.close()
    lines = log_store.read_lines("job-a", 0)
    assert TaskExit(0) == ended, lines
    cgroup_line = next(line for line in lines if line.startswith("cgroup"))
    assert handle in cgroup_line  # the container id names its cgroup
    assert "secret visible False" in lines
    assert "env job-a/task-0" in lines
    assert "written inside" == (area / "out").read_text()


async def test_logs_stream_while_the_task_runs(engine_runtime: ContainerRuntime, log_store: LogStore) -> None:
    """A line printed before a long sleep is in the log store while the container still runs."""
    spec = _spec(log_store, "import time; print('first', flush=True); time.sleep(300)")
    handle = await engine_runtime.start(spec)
    await _wait_for_line(log_store, "first")
    ended = await engine_runtime.kill(handle, grace_seconds=5)
    assert ended.exit_code < 0  # killed by a signal, reported as the process runtime does
    assert not ended.oom_killed


async def test_memory_limit_is_enforced_and_reported(engine_runtime: ContainerRuntime, log_store: LogStore) -> None:
    """A task allocating past its 64 MiB limit is OOM-killed and the exit says so."""
    code = (
        "import time; print('allocating', flush=True);"
        "chunks = [bytearray(16 << 20) for _ in range(32)]; time.sleep(5)"
    )
    spec = _spec(log_store, code, memory_bytes=64 << 20)
    handle = await engine_runtime.start(spec)
    ended = await asyncio.wait_for(engine_runtime.wait(handle), 120)
    assert ended.oom_killed, ended
    assert "OOM-killed: the task exceeded its memory limit of 64 MiB (ask for more memory)" == ended.reason


async def test_kill_removes_the_container(engine_runtime: ContainerRuntime, log_store: LogStore) -> None:
    """After kill a TERM-ignoring task is gone from the engine; a second kill returns the same exit."""
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "print('up', flush=True); time.sleep(300)"
    )
    handle = await engine_runtime.start(_spec(log_store, code))
    await _wait_for_line(log_store, "up")
    ended = await engine_runtime.kill(handle, grace_seconds=1)
    assert -signal.SIGKILL == ended.exit_code
    assert handle not in await engine_runtime.listed()  # type: ignore[attr-defined]
    assert ended == await engine_runtime.kill(handle, grace_seconds=1)


async def test_stats_report_memory_of_a_running_task(engine_runtime: ContainerRuntime, log_store: LogStore) -> None:
    """stats() of a task holding 32 MiB reports at least that much memory in use."""
    code = (
        "import time; x = bytearray(32 << 20); x[::4096] = b'x' * len(x[::4096]);"
        "print('held', flush=True); time.sleep(300)"
    )
    handle = await engine_runtime.start(_spec(log_store, code))
    await _wait_for_line(log_store, "held")
    stats = await engine_runtime.stats(handle)
    await engine_runtime.kill(handle, grace_seconds=0)
    assert stats is not None
    assert stats.memory_bytes >= 32 << 20


async def test_missing_image_is_a_start_error(engine_runtime: ContainerRuntime, log_store: LogStore) -> None:
    """An image the engine does not have (and cannot pull) fails the start with a message naming it."""
    spec = TaskSpec(argv=["true"], log=log_store.open_writer("job-a", 0, 0), image="iris.test/no-such-image:1")
    with pytest.raises(TaskStartError, match="no-such-image"):
        await engine_runtime.start(spec)


async def test_recover_kills_only_this_workers_leftovers(
    engine_runtime: ContainerRuntime, log_store: LogStore, request: pytest.FixtureRequest
) -> None:
    """A new runtime for the same worker id removes the old one's containers and leaves other workers' alone."""
    name = str(engine_runtime.name)
    mine = make_engine_runtime(name, request, worker_id="recover-me")
    other = make_engine_runtime(name, request, worker_id="someone-else")
    try:
        sleeper = "import time; print('up', flush=True); time.sleep(300)"
        left = await mine.start(_spec(log_store, sleeper, worker_id="recover-me"))
        kept = await other.start(_spec(log_store, sleeper, attempt=1, worker_id="someone-else"))
        restarted = make_engine_runtime(name, request, worker_id="recover-me")
        recovered = await restarted.recover()
        assert [left] == [r.handle for r in recovered]
        assert "job-a/task-0" == recovered[0].task_id
        assert left not in await mine.listed()  # type: ignore[attr-defined]
        assert kept in await other.listed()  # type: ignore[attr-defined]
        await restarted.close()
    finally:
        for runtime in (mine, other):
            await runtime.close()
            sweeper = make_engine_runtime(name, request, worker_id=str(runtime._worker_id))  # type: ignore[attr-defined]
            await sweeper.recover()
            await sweeper.close()


async def test_a_shipped_callable_runs_in_the_image_from_the_mounted_runner_code(
    engine_runtime: ContainerRuntime, log_store: LogStore, tmp_path: Path
) -> None:
    """The agent's path in an image that has only a Python: a closure over a class made at run time, using
    a package on the job's PYTHONPATH, returns through the task's store; an exception is one line."""
    import cloudpickle

    from worker_agent.storage import BlobStore
    from worker_agent.task_area import TaskArea, stage_runner_code
    from worker_agent.task_runner import read_result, read_task_error, task_runner_argv

    package = tmp_path / "site" / "jobpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("def greet(name):\n    return 'hello ' + name\n")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    tasks.chmod(0o711)
    staged = str(stage_runner_code(tasks))

    class Box:
        def __init__(self, value: str) -> None:
            self.value = value

    def shout(box: Box) -> Box:
        import jobpkg  # type: ignore[import-not-found]  # only on the task's PYTHONPATH

        return Box(jobpkg.greet(box.value).upper())

    def fail() -> None:
        raise ValueError("bad input\nin two lines")

    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = [(shout, (Box("iris"),), {}), (fail, (), {})]
    outcomes = []
    for attempt, call in enumerate(calls):
        area = TaskArea.at(tasks, "job-a", 0, attempt)
        area.create()
        own = BlobStore(area.store_dir)
        own.put("fn", cloudpickle.dumps(call))
        spec = TaskSpec(
            argv=task_runner_argv(area.store_url, "fn", "result", PY), log=log_store.open_writer("job-a", 0, attempt),
            image=PYTHON_IMAGE, job_id="job-a", attempt=attempt, cwd=str(area.work_dir), runner_code=staged,
            mounts=[Mount(str(area.path), read_only=False), Mount(str(package.parent))],
            env={"PYTHONPATH": str(package.parent)}, memory_bytes=256 << 20,
        )  # fmt: skip
        ended = await asyncio.wait_for(engine_runtime.wait(await engine_runtime.start(spec)), 120)
        spec.log.close()
        outcomes.append((ended, own))
    (succeeded, own), (failed, failed_own) = outcomes
    assert TaskExit(0) == succeeded, log_store.read_lines("job-a", 0)
    assert "HELLO IRIS" == read_result(own, "result").value
    assert 1 == failed.exit_code
    assert "ValueError: bad input in two lines" == read_task_error(failed_own, "result")
    assert "iris task failed: ValueError: bad input in two lines" in log_store.read_lines("job-a", 0)


RENEWED_LEASE = 2.0  # how far ahead the renewed container's lease is moved, every 0.2 s


@pytest.mark.parametrize("engine", ["docker", "containerd"])
async def test_a_container_whose_lease_is_not_renewed_dies_by_the_watchdog(
    engine: str, request: pytest.FixtureRequest, log_store: LogStore, tmp_path: Path
) -> None:
    """With a 1 s lease nobody renews, the lease watchdog kills the container through its process's host pid
    (not through the engine), and the exit says the lease expired; a renewed one runs on."""
    from worker_agent.leases.lease_watchdog import lease_clock
    from worker_agent.runtimes.select import RuntimeOptions, make_runtime

    found = request.getfixturevalue("dockerd" if engine == "docker" else "containerd")
    options = RuntimeOptions(
        worker_id=f"lease-{os.getpid()}", ledger_dir=tmp_path / "leases", lease_seconds=1.0,
        docker_host=found.url if engine == "docker" else None,
        containerd_socket=str(found.socket) if engine == "containerd" else "", cri_log_dir=tmp_path / "cri-logs",
    )  # fmt: skip
    runtime = make_runtime(engine, options)
    assert isinstance(runtime, LeasedRuntime)
    spec = _spec(log_store, "import time; time.sleep(60)")
    try:
        renewed = await runtime.start(replace(spec, lease_deadline=lease_clock() + 30))

        async def renew() -> None:  # 2 s ahead every 0.2 s: 1 s ahead once lost a container to a stall under load
            while True:
                runtime.renew(renewed, lease_clock() + RENEWED_LEASE)
                await asyncio.sleep(0.2)

        renewing = asyncio.ensure_future(renew())
        ending = asyncio.ensure_future(runtime.wait(renewed))
        began = lease_clock()
        fenced = await runtime.start(replace(spec, lease_deadline=began + 1.0))
        ended = await asyncio.wait_for(runtime.wait(fenced), timeout=20)
        assert (True, LEASE_EXPIRED_REASON) == (ended.fenced, ended.reason)
        assert lease_clock() - began < 10
        assert runtime.leases
        while lease_clock() - began < RENEWED_LEASE + 1.0:  # renewed, it lives past the lease it had at `began`
            assert not ending.done()
            await asyncio.sleep(0.2)
        renewing.cancel()
        await runtime.kill(renewed, 0)
    finally:
        await runtime.recover()
        await runtime.close()


async def test_lines_the_docker_log_stream_missed_reach_the_log_once_the_container_ends(
    request: pytest.FixtureRequest, log_store: LogStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Docker's follow stream can close as a container ends, before it has handed over the last lines (a task's
    final error line went missing so). Here it closes after the first chunk: the rest still reaches the log,
    in order and once."""
    from worker_agent.runtimes.docker import DockerRuntime

    def first_chunk_only(self: DockerRuntime, container_id: str, spec: TaskSpec, logged: list[int]) -> None:
        stream = self._client.logs(container_id, stdout=True, stderr=True, stream=True, follow=True)
        chunk = next(iter(stream), b"")
        spec.log.write(chunk)
        logged[0] += len(chunk)

    monkeypatch.setattr(DockerRuntime, "_pump_logs", first_chunk_only)
    runtime = make_engine_runtime("docker", request, f"test-{os.getpid()}-catch-up")
    try:
        code = "import time; print('first', flush=True); time.sleep(1); print(*range(500), sep='\\n'); print('last')"
        spec = _spec(log_store, code)
        ended = await asyncio.wait_for(runtime.wait(await runtime.start(spec)), 120)
        spec.log.close()
    finally:
        await runtime.close()
    assert TaskExit(0) == ended
    assert ["first", *map(str, range(500)), "last"] == log_store.read_lines("job-a", 0)
