"""Tests for ProcessRuntime: logs, environment, start errors, and kills that leave no orphans."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Awaitable
from pathlib import Path

import pytest

from worker_agent.runtimes.base import ContainerRuntime, TaskExit, TaskSpec, TaskStartError, task_environment
from worker_agent.runtimes.cgroups import CgroupLimits
from worker_agent.runtimes.process import ProcessRuntime
from worker_agent.storage import LogStore


def _group_is_gone(pgid: int) -> bool:
    """True when no live (non-zombie) process is left in the group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    for entry in Path("/proc").iterdir():
        if entry.name.isdecimal():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                return False
    return True


async def _eventually_gone(pgid: int, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while not _group_is_gone(pgid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def _code(ended: Awaitable[TaskExit]) -> int:
    """The exit code of a wait or kill."""
    return (await ended).exit_code


def _spec(log_store: LogStore, script: str, **kwargs: object) -> TaskSpec:
    return TaskSpec(argv=["sh", "-c", script], log=log_store.open_writer("job", 0, 0), **kwargs)  # type: ignore[arg-type]


def test_process_runtime_satisfies_the_protocol() -> None:
    """ProcessRuntime type-checks as a ContainerRuntime and is named 'process'."""
    runtime: ContainerRuntime = ProcessRuntime()
    assert runtime.name == "process"


async def test_stdout_and_stderr_go_to_the_log(runtime: ProcessRuntime, log_store: LogStore) -> None:
    """Both streams land interleaved in the attempt's log and the exit code is returned."""
    spec = _spec(log_store, "echo out; echo err >&2; exit 3")
    task = await runtime.start(spec)
    assert await _code(runtime.wait(task)) == 3
    spec.log.close()
    assert log_store.read_lines("job", 0) == ["out", "err"]
    assert await runtime.stats(task) is None


async def test_the_exit_says_how_long_the_process_ran(runtime: ProcessRuntime, log_store: LogStore) -> None:
    """What an attempt is charged for: the process's run, from its start to its exit, not the runtime's work
    around it (the agent used to time its whole `start` call, 10-25 ms more under load); killed, the same."""
    outer = time.monotonic()
    task = await runtime.start(_spec(log_store, "sleep 0.3"))
    ended = await runtime.wait(task)
    outer = time.monotonic() - outer
    assert ended.ran_seconds is not None
    assert 0.25 < ended.ran_seconds <= outer
    killed = await runtime.start(_spec(log_store, "sleep 30"))
    await asyncio.sleep(0.2)
    ended = await runtime.kill(killed, grace_seconds=1)
    assert ended.ran_seconds is not None and 0.15 < ended.ran_seconds < 5


async def test_stdin_is_empty(runtime: ProcessRuntime, log_store: LogStore) -> None:
    """A task reading stdin gets EOF at once instead of hanging."""
    spec = _spec(log_store, "cat; echo done")
    task = await runtime.start(spec)
    assert await asyncio.wait_for(_code(runtime.wait(task)), 5) == 0
    assert log_store.read_lines("job", 0) == ["done"]


async def test_environment_is_minimal_plus_spec(
    runtime: ProcessRuntime, log_store: LogStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The task sees the spec's variables and PATH but not the agent's other variables."""
    monkeypatch.setenv("AGENT_SECRET", "hunter2")
    spec = _spec(
        log_store,
        'echo "x=$IRIS_TASK_INDEX secret=$AGENT_SECRET unbuf=$PYTHONUNBUFFERED cwd=$(pwd)"',
        env={"IRIS_TASK_INDEX": "7"},
        cwd=str(tmp_path),
    )
    task = await runtime.start(spec)
    assert await _code(runtime.wait(task)) == 0
    assert [f"x=7 secret= unbuf=1 cwd={tmp_path}"] == log_store.read_lines("job", 0)


def test_task_environment_lets_the_spec_override_defaults() -> None:
    """Spec variables win over inherited ones and over PYTHONUNBUFFERED; PATH has a fallback."""
    env = task_environment({"PATH": "/opt/bin", "PYTHONUNBUFFERED": "0"}, host_env={"HOME": "/h", "X": "1"})
    assert env == {"HOME": "/h", "PATH": "/opt/bin", "PYTHONUNBUFFERED": "0"}
    assert os.defpath == task_environment({}, host_env={})["PATH"]


async def test_missing_executable_is_a_task_start_error(runtime: ProcessRuntime, log_store: LogStore) -> None:
    """An executable that is not on PATH gives a clear TaskStartError."""
    spec = TaskSpec(argv=["iris-no-such-binary", "--x"], log=log_store.open_writer("job", 0, 0))
    with pytest.raises(TaskStartError) as info:
        await runtime.start(spec)
    assert str(info.value) == "cannot start task: executable 'iris-no-such-binary' not found"


async def test_missing_cwd_is_a_task_start_error(
    runtime: ProcessRuntime, log_store: LogStore, tmp_path: Path
) -> None:
    """A working directory that does not exist is reported as such, not as a missing executable."""
    spec = _spec(log_store, "true", cwd=str(tmp_path / "nope"))
    with pytest.raises(TaskStartError, match=r"working directory .*nope.* is unusable"):
        await runtime.start(spec)


async def test_non_executable_file_is_a_task_start_error(
    runtime: ProcessRuntime, log_store: LogStore, tmp_path: Path
) -> None:
    """A file without the execute bit is a permission error at start."""
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    spec = TaskSpec(argv=[str(script)], log=log_store.open_writer("job", 0, 0))
    with pytest.raises(TaskStartError, match="permission denied"):
        await runtime.start(spec)


@pytest.mark.parametrize(
    "kwargs",
    [{"argv": []}, {"argv": ["a\x00b"]}, {"env": {"A=B": "x"}}, {"env": {"": "x"}}, {"cwd": ""}],
)
def test_task_spec_validates_at_construction(kwargs: dict[str, object], log_store: LogStore) -> None:
    """Empty commands, NUL bytes and malformed variable names are rejected when the spec is built."""
    fields: dict[str, object] = {"argv": ["true"], "log": log_store.open_writer("job", 0, 0), **kwargs}
    with pytest.raises(ValueError):
        TaskSpec(**fields)  # type: ignore[arg-type]


def test_task_spec_copies_its_inputs(log_store: LogStore) -> None:
    """Mutating the caller's list and dict afterwards does not change the spec."""
    argv, env = ["echo", "a"], {"K": "v"}
    spec = TaskSpec(argv=argv, env=env, log=log_store.open_writer("job", 0, 0))
    argv.append("b")
    env["K"] = "changed"
    assert spec.argv == ("echo", "a")
    assert spec.env == {"K": "v"}


async def test_kill_takes_down_a_term_ignoring_task_and_its_grandchild(
    runtime: ProcessRuntime, log_store: LogStore
) -> None:
    """kill(grace=0.5) SIGKILLs a task that traps TERM, and its background sleep, leaving no process."""
    spec = _spec(log_store, "trap '' TERM; sleep 300 & echo started; wait; wait; wait")
    task = await runtime.start(spec)
    await _wait_for_line(log_store, "started")
    started = time.monotonic()
    code = await _code(runtime.kill(task, grace_seconds=0.5))
    assert code == -signal.SIGKILL
    assert time.monotonic() - started < 3
    assert await _eventually_gone(int(task))
    assert await runtime.stats(task) is None


async def test_kill_of_a_cooperative_task_is_quick(runtime: ProcessRuntime, log_store: LogStore) -> None:
    """A task that exits on SIGTERM is reported as killed by SIGTERM well before the grace ends."""
    task = await runtime.start(_spec(log_store, "exec sleep 300"))
    started = time.monotonic()
    assert await _code(runtime.kill(task, grace_seconds=10)) == -signal.SIGTERM
    assert time.monotonic() - started < 2


async def test_kill_is_idempotent_and_safe_alongside_wait(
    runtime: ProcessRuntime, log_store: LogStore
) -> None:
    """Concurrent wait and kills all return the same exit code; a later kill is a no-op."""
    task = await runtime.start(_spec(log_store, "exec sleep 300"))
    waiter = asyncio.create_task(_code(runtime.wait(task)))
    codes = await asyncio.gather(
        _code(runtime.kill(task, grace_seconds=1)), _code(runtime.kill(task, grace_seconds=1))
    )
    assert codes == [-signal.SIGTERM, -signal.SIGTERM]
    assert await waiter == -signal.SIGTERM
    assert await _code(runtime.kill(task)) == -signal.SIGTERM


async def test_wait_sweeps_processes_left_behind(runtime: ProcessRuntime, log_store: LogStore) -> None:
    """When the main process exits, a background child it left in the group is killed too."""
    task = await runtime.start(_spec(log_store, "sleep 300 & exit 0"))
    assert await asyncio.wait_for(_code(runtime.wait(task)), 5) == 0
    assert await _eventually_gone(int(task))


async def test_cancelled_kill_still_sigkills(runtime: ProcessRuntime, log_store: LogStore) -> None:
    """Cancelling kill during its grace period does not leave the task running."""
    task = await runtime.start(_spec(log_store, "trap '' TERM; echo started; while :; do sleep 0.1; done"))
    await _wait_for_line(log_store, "started")
    killer = asyncio.create_task(_code(runtime.kill(task, grace_seconds=30)))
    await asyncio.sleep(0.2)
    killer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await killer
    assert await asyncio.wait_for(_code(runtime.wait(task)), 5) == -signal.SIGKILL
    assert await _eventually_gone(int(task))


async def test_image_is_ignored_by_the_process_runtime(runtime: ProcessRuntime, log_store: LogStore) -> None:
    """A spec naming an image still runs as a host process."""
    spec = TaskSpec(argv=["true"], log=log_store.open_writer("job", 0, 0), image="python:3.11")
    task = await runtime.start(spec)
    assert await _code(runtime.wait(task)) == 0


def test_negative_grace_is_rejected() -> None:
    """A negative straggler grace is a construction error."""
    with pytest.raises(ValueError):
        ProcessRuntime(straggler_grace_seconds=-1)


async def _wait_for_line(log_store: LogStore, line: str, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while line not in log_store.read_lines("job", 0):
        assert time.monotonic() < deadline, f"{line!r} never appeared in the log"
        await asyncio.sleep(0.02)



needs_cgroups = pytest.mark.skipif(
    CgroupLimits.detect() is None, reason="no writable cgroup hierarchy here (the agent is not root)"
)
SHOW_CGROUP = "print(open('/proc/self/cgroup').read(), flush=True); "


def _memory_group(log_store: LogStore) -> Path:
    """The memory cgroup directory the task printed it was in."""
    for line in log_store.read_lines("job", 0):
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if path.startswith("/iris/task-") and (controllers == "" or "memory" in controllers.split(",")):
            return Path("/sys/fs/cgroup") / ("" if controllers == "" else "memory") / path.lstrip("/")
    raise AssertionError(f"the task was in no iris cgroup: {log_store.read_lines('job', 0)}")


@needs_cgroups
async def test_memory_limit_is_enforced_and_reported(log_store: LogStore) -> None:
    """A process allocating past its 64 MiB is OOM-killed by the kernel, the exit says so, its cgroup goes."""
    code = SHOW_CGROUP + "import time; chunks = [bytearray(16 << 20) for _ in range(32)]; time.sleep(5)"
    runtime = ProcessRuntime()
    spec = TaskSpec(argv=[sys.executable, "-c", code], log=log_store.open_writer("job", 0, 0), memory_bytes=64 << 20)
    ended = await asyncio.wait_for(runtime.wait(await runtime.start(spec)), 60)
    assert ended.oom_killed, ended
    assert "OOM-killed: the task exceeded its memory limit of 64 MiB (ask for more memory)" == ended.reason
    assert not _memory_group(log_store).exists()


@needs_cgroups
async def test_a_task_within_its_limits_succeeds_and_its_cgroup_goes(log_store: LogStore) -> None:
    """Within its memory the task runs to success inside its own cgroup, removed after it ends."""
    runtime = ProcessRuntime()
    code = SHOW_CGROUP + "chunk = bytearray(16 << 20)"
    spec = TaskSpec(
        argv=[sys.executable, "-c", code], log=log_store.open_writer("job", 0, 0),
        memory_bytes=256 << 20, cpu_millis=500,
    )  # fmt: skip
    ended = await asyncio.wait_for(runtime.wait(await runtime.start(spec)), 60)
    assert TaskExit(0) == ended
    assert not _memory_group(log_store).exists()


@needs_cgroups
async def test_a_limited_task_is_in_its_group_from_its_first_instruction(log_store: LogStore) -> None:
    """The task joins its cgroup before exec, with the pid the runtime reports, and keeps its exit code."""
    runtime = ProcessRuntime()
    code = SHOW_CGROUP + "import os, sys; print('pid', os.getpid(), flush=True); sys.exit(3)"
    spec = TaskSpec(argv=[sys.executable, "-c", code], log=log_store.open_writer("job", 0, 0), memory_bytes=128 << 20)
    handle = await runtime.start(spec)
    ended = await asyncio.wait_for(runtime.wait(handle), 60)
    assert 3 == ended.exit_code
    assert f"pid {handle}" in log_store.read_lines("job", 0)
    _memory_group(log_store)  # the first line the task printed names its own group


@needs_cgroups
@pytest.mark.parametrize(("argv", "reason"), [
    (["iris-no-such-command"], "cannot start task: executable 'iris-no-such-command' not found"),
    (["./missing.sh"], "cannot start task: executable './missing.sh' not found"),
])  # fmt: skip
async def test_a_limited_task_with_a_bad_executable_is_refused_by_name(
    log_store: LogStore, argv: list[str], reason: str
) -> None:
    """With limits too, a missing executable is a start error naming it, not an anonymous exit 127."""
    runtime = ProcessRuntime()
    spec = TaskSpec(argv=argv, log=log_store.open_writer("job", 0, 0), memory_bytes=128 << 20)
    with pytest.raises(TaskStartError) as info:
        await runtime.start(spec)
    assert reason == str(info.value)


def _is_live_sleep(pid: int, argument: str) -> bool:
    """Whether `pid` is still a live (not zombie) `sleep <argument>`."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return cmdline == f"sleep\0{argument}\0".encode() and stat[stat.rfind(")") + 2] not in "ZX"


async def _sleep_ends(pid: int, argument: str, within: float = 3.0) -> bool:
    """Whether `sleep <argument>` at `pid` is gone within `within` seconds."""
    deadline = time.monotonic() + within
    while _is_live_sleep(pid, argument):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


# Shows its cgroup, starts `sleep <n>` in a session of its own (out of the task's process group, as
# a daemon does), and waits until it runs, noting its pid in <file>; then the script goes on.
ESCAPE = (
    "cat /proc/self/cgroup; setsid sh -c 'echo $$ >{file}.tmp; mv {file}.tmp {file}; exec sleep {n}' & "
    "until [ -s {file} ]; do sleep 0.02; done; "
)


@needs_cgroups
@pytest.mark.parametrize(("then", "argument"), [("exit 0", "3117"), ("sleep 300", "3118")])
async def test_an_attempt_takes_its_setsid_processes_with_it(
    log_store: LogStore, tmp_path: Path, then: str, argument: str
) -> None:
    """A process the task moved to its own session dies with the attempt (it exits 0 or is killed); its cgroup goes."""
    runtime = ProcessRuntime(straggler_grace_seconds=0.5)
    noted = tmp_path / "escaped"
    spec = _spec(log_store, ESCAPE.format(file=noted, n=argument) + then, memory_bytes=256 << 20, cpu_millis=250)
    handle = await runtime.start(spec)
    escaped = 0
    try:
        deadline = time.monotonic() + 10
        while not noted.exists() or not noted.read_text().strip():
            assert time.monotonic() < deadline, "the task never started its setsid process"
            await asyncio.sleep(0.02)
        escaped = int(noted.read_text())
        ended = runtime.wait(handle) if then == "exit 0" else runtime.kill(handle, grace_seconds=0.5)
        code = await asyncio.wait_for(_code(ended), 30)
        assert (0 if then == "exit 0" else -signal.SIGTERM) == code
        assert await _sleep_ends(escaped, argument), f"sleep {argument} (pid {escaped}) outlived its task"
        assert not _memory_group(log_store).exists()
    finally:
        if escaped and _is_live_sleep(escaped, argument):
            os.kill(escaped, signal.SIGKILL)
