"""Shipped callables forked from the process runtime's warm interpreter: the same task, started in milliseconds.

The fresh path's start-up cost is what these tests avoid asserting on (timing is for the benches);
they assert what makes the fast path the fast path (the task is a child of the one warm
interpreter, so the runner's code was imported once, not per task) and that it keeps everything
the fresh path guarantees: results and one-line errors through the task's own store, its log,
its user, its cgroup, its environment and ``sys.path``, and kills of its whole group.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from iris.client.code_shipping import pickle_callable
from tests.worker_agent.conftest import REPO_ROOT
from worker_agent.runtimes.base import Mount, TaskExit, TaskSpec, TaskStartError
from worker_agent.runtimes.cgroups import CgroupLimits
from worker_agent.runtimes.forkserver import _died_unheard
from worker_agent.runtimes.process import ProcessRuntime, TaskUser, process_group_alive
from worker_agent.storage import BlobStore, LogStore
from worker_agent.task_area import TaskArea
from worker_agent.task_runner import read_result, read_task_error, task_runner_argv

FUNCTION, RESULT = "jobs/j/function", "jobs/j/results/task-0/attempt-0"


def _facts() -> dict[str, Any]:
    """What a task sees of itself."""
    import os
    import sys
    from pathlib import Path

    return {
        "ppid": os.getppid(), "pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
        "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "cwd": str(Path.cwd()),
        "env": dict(os.environ), "path": list(sys.path), "argv": list(sys.argv),
        "main": getattr(sys.modules["__main__"].__spec__, "name", None),
        "cgroup": Path("/proc/self/cgroup").read_text(),
        "dumpable": __import__("ctypes").CDLL(None).prctl(3, 0, 0, 0, 0),  # PR_GET_DUMPABLE
        "fds": sorted(int(fd.name) for fd in Path("/proc/self/fd").iterdir()),
    }  # fmt: skip


def _fail() -> None:
    raise ValueError("bad\ninput")


def _leave_work_for_exit() -> str:
    """A non-daemon thread still writing and an atexit handler: both must be done before the process ends."""
    import atexit
    import threading
    import time
    from pathlib import Path

    def late() -> None:
        time.sleep(0.3)
        Path("late.txt").write_text("written after the function returned")

    threading.Thread(target=late).start()
    atexit.register(print, "atexit ran", flush=True)
    return "returned"


def _sleep_forever() -> None:
    import time

    print("sleeping", flush=True)
    time.sleep(600)


@pytest.fixture
async def warm(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ProcessRuntime]:
    """A process runtime whose forkserver is ready; closed (server and all) after the test."""
    pythonpath = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", f"{REPO_ROOT}{os.pathsep}{pythonpath}" if pythonpath else str(REPO_ROOT))
    monkeypatch.setenv("IRIS_AGENT_SECRET", "not for tasks")
    runtime = ProcessRuntime(straggler_grace_seconds=0.5)
    assert await runtime.warm_up()
    yield runtime
    await runtime.close()


async def _run(
    runtime: ProcessRuntime, tmp_path: Path, log_store: LogStore, fn: Callable[..., Any], attempt: int = 0,
    **spec: Any,
) -> tuple[TaskExit, BlobStore, TaskArea]:  # fmt: skip
    """Ship `fn` into a fresh task area, run it as the agent does, and return its exit and its own store."""
    area = TaskArea.at(tmp_path / "tasks", "j", 0, attempt)
    area.create()
    own = BlobStore(area.store_dir)
    own.put(FUNCTION, pickle_callable(fn))  # as the client ships it: this module by value
    log = log_store.open_writer("j", 0, attempt)
    spec.setdefault("env", {})
    task = TaskSpec(
        argv=task_runner_argv(area.store_url, FUNCTION, RESULT, runtime.python), log=log,
        cwd=str(area.work_dir), mounts=[Mount(str(area.path), read_only=False)], **spec,
    )  # fmt: skip
    handle = await runtime.start(task)
    ended = await asyncio.wait_for(runtime.wait(handle), 60)
    log.close()
    return ended, own, area


async def test_callables_are_forked_from_one_warm_interpreter(
    warm: ProcessRuntime, tmp_path: Path, log_store: LogStore
) -> None:
    """Two callables are children of the same forkserver (its imports done once), each leading its own session."""
    with capture_logs() as events:
        first, own, _ = await _run(warm, tmp_path, log_store, _facts)
        second, own_two, _ = await _run(warm, tmp_path, log_store, _facts, attempt=1)
    assert TaskExit(0) == first == second, log_store.read_lines("j", 0)
    facts, again = read_result(own, RESULT), read_result(own_two, RESULT)
    assert warm.forkserver_pid == facts["ppid"] == again["ppid"]
    assert facts["pid"] == facts["pgid"] == facts["sid"] != again["pid"]
    assert [True, True] == [e["forked"] for e in events if e["event"] == "task started"]


async def test_a_forked_task_sees_what_a_fresh_one_would(
    warm: ProcessRuntime, tmp_path: Path, log_store: LogStore
) -> None:
    """Its cwd, only the task's environment, sys.path from cwd and PYTHONPATH, the runner as __main__, only stdio."""
    extra = tmp_path / "bundle"
    extra.mkdir()
    ended, own, area = await _run(warm, tmp_path, log_store, _facts, env={"PYTHONPATH": str(extra), "JOB_VAR": "x"})
    assert TaskExit(0) == ended
    facts = read_result(own, RESULT)
    assert str(area.work_dir) == facts["cwd"]
    assert "x" == facts["env"]["JOB_VAR"]
    assert "IRIS_AGENT_SECRET" not in facts["env"]
    assert str(extra) == facts["env"]["PYTHONPATH"]
    assert [str(area.work_dir), str(extra)] == facts["path"][:2]
    assert "worker_agent.task_runner" == facts["main"]
    assert ["--store", area.store_url, "--function", FUNCTION, "--result", RESULT] == facts["argv"][1:]
    assert [0, 1, 2, 3] == facts["fds"]  # stdio, and the descriptor listing /proc/self/fd


async def test_a_forked_task_fails_with_one_line_and_its_traceback_in_the_log(
    warm: ProcessRuntime, tmp_path: Path, log_store: LogStore
) -> None:
    """An exception is exit 1, the one-line reason in the task's store, the traceback in its log."""
    ended, own, _ = await _run(warm, tmp_path, log_store, _fail)
    assert 1 == ended.exit_code
    assert "ValueError: bad input" == read_task_error(own, RESULT)
    lines = log_store.read_lines("j", 0)
    assert "Traceback (most recent call last):" in lines
    assert "iris task failed: ValueError: bad input" == lines[-1]


@pytest.mark.parametrize("forked", [True, False])
async def test_a_task_ends_after_its_threads_and_atexit_handlers(
    warm: ProcessRuntime, tmp_path: Path, log_store: LogStore, forked: bool
) -> None:
    """The runner skips only the interpreter's teardown: non-daemon threads finish, atexit handlers run."""
    env = {} if forked else {"PYTHONHASHSEED": "0"}  # a start-up variable: a fresh interpreter
    ended, own, area = await _run(warm, tmp_path, log_store, _leave_work_for_exit, env=env)
    assert TaskExit(0) == ended
    assert "returned" == read_result(own, RESULT)
    assert "written after the function returned" == (area.work_dir / "late.txt").read_text()
    assert ["atexit ran"] == log_store.read_lines("j", 0)


async def test_a_forked_task_is_killed_with_its_group(
    warm: ProcessRuntime, tmp_path: Path, log_store: LogStore
) -> None:
    """`kill` reaches a task that is the forkserver's child, not the agent's, and reports the signal."""
    area = TaskArea.at(tmp_path / "tasks", "j", 0, 0)
    area.create()
    BlobStore(area.store_dir).put(FUNCTION, pickle_callable(_sleep_forever))
    log = log_store.open_writer("j", 0, 0)
    spec = TaskSpec(argv=task_runner_argv(area.store_url, FUNCTION, RESULT, warm.python), log=log,
                    cwd=str(area.work_dir))  # fmt: skip
    handle = await warm.start(spec)
    while "sleeping" not in log_store.read_lines("j", 0):  # noqa: ASYNC110 - the log is a file
        await asyncio.sleep(0.02)
    ended = await asyncio.wait_for(warm.kill(handle, grace_seconds=5), 30)
    assert -signal.SIGTERM == ended.exit_code
    with pytest.raises(ProcessLookupError):
        os.killpg(int(handle), 0)


async def test_a_dead_forkserver_is_replaced_and_its_running_task_still_ends(
    warm: ProcessRuntime, tmp_path: Path, log_store: LogStore
) -> None:
    """Killing the forkserver orphans its task, which can still be killed; callables start fresh, then warm again."""
    area = TaskArea.at(tmp_path / "tasks", "j", 0, 9)
    area.create()
    BlobStore(area.store_dir).put(FUNCTION, pickle_callable(_sleep_forever))
    spec = TaskSpec(argv=task_runner_argv(area.store_url, FUNCTION, RESULT, warm.python),
                    log=log_store.open_writer("j", 0, 9), cwd=str(area.work_dir))  # fmt: skip
    handle = await warm.start(spec)
    while "sleeping" not in log_store.read_lines("j", 0):  # noqa: ASYNC110 - the log is a file
        await asyncio.sleep(0.02)
    old = warm.forkserver_pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    while warm.forkserver_pid == old:  # noqa: ASYNC110 - the runtime learns it from the closed socket
        await asyncio.sleep(0.02)
    await asyncio.wait_for(warm.kill(handle, grace_seconds=5), 30)
    assert not process_group_alive(int(handle))  # (a zombie until the host's init reaps it)
    with capture_logs() as events:
        ended, _, _ = await _run(warm, tmp_path, log_store, _facts)
        assert TaskExit(0) == ended
        assert await warm.warm_up()
        ended, own, _ = await _run(warm, tmp_path, log_store, _facts, attempt=1)
    assert TaskExit(0) == ended
    assert [False, True] == [e["forked"] for e in events if e["event"] == "task started"]
    assert old != warm.forkserver_pid == read_result(own, RESULT)["ppid"]


async def test_a_missing_working_directory_is_a_start_error(
    warm: ProcessRuntime, tmp_path: Path, log_store: LogStore
) -> None:
    """The child could not become the task: the start fails naming the directory, as the fresh path does."""
    missing = tmp_path / "gone"
    spec = TaskSpec(argv=task_runner_argv("file:///x", FUNCTION, RESULT, warm.python),
                    log=log_store.open_writer("j", 0, 0), cwd=str(missing))  # fmt: skip
    with pytest.raises(TaskStartError) as info:
        await warm.start(spec)
    assert f"cannot start task: working directory {str(missing)!r} is unusable (No such file or directory)" == str(
        info.value
    )


async def test_a_task_that_sets_start_up_variables_starts_fresh(
    warm: ProcessRuntime, tmp_path: Path, log_store: LogStore
) -> None:
    """PYTHONHASHSEED is read when an interpreter starts: such a task gets its own interpreter."""
    with capture_logs() as events:
        ended, own, _ = await _run(warm, tmp_path, log_store, _facts, env={"PYTHONHASHSEED": "0"})
    assert TaskExit(0) == ended
    assert warm.forkserver_pid != read_result(own, RESULT)["ppid"]
    assert [False] == [e["forked"] for e in events if e["event"] == "task started"]


@pytest.mark.skipif(os.geteuid() != 0, reason="running tasks as another user needs root")
async def test_a_forked_task_runs_as_the_task_user(log_store: LogStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """As root, the child becomes `nobody` with its own group only, and writes its result to its own area."""
    user = TaskUser.lookup("nobody")
    root = Path(tempfile.mkdtemp(prefix="iris-warm-test-"))  # the task user must reach its area, as on a worker
    os.chmod(root, 0o711)  # noqa: PTH101 - not blocking I/O worth a thread
    # And the runner's code, which the child reads as `nobody` (the agent refuses to start where it cannot,
    # worker_agent/runtimes/task_user_check.py): a copy, since the checkout may sit in a 0700 directory.
    code = root / "code"
    shutil.copytree(REPO_ROOT / "worker_agent", code / "worker_agent", ignore=shutil.ignore_patterns("__pycache__"))
    code.chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", str(code))
    runtime = ProcessRuntime(run_as=user)
    try:
        assert await runtime.warm_up()
        ended, own, area = await _run(runtime, root, log_store, _facts)
        assert TaskExit(0) == ended, log_store.read_lines("j", 0)
        facts = read_result(own, RESULT)
    finally:
        await runtime.close()
        shutil.rmtree(root)
    assert (user.uid, user.gid, []) == (facts["uid"], facts["gid"], facts["groups"])  # no supplementary group
    assert str(area.work_dir) == facts["env"]["HOME"]
    assert 1 == facts["dumpable"]  # as after an exec: the task user may inspect its own task


@pytest.mark.skipif(CgroupLimits.detect() is None, reason="no writable cgroup hierarchy here (the agent is not root)")
async def test_a_forked_task_is_in_its_cgroup(warm: ProcessRuntime, tmp_path: Path, log_store: LogStore) -> None:
    """With limits, the child joined the attempt's own cgroups before the task's code ran (memory and cpu)."""
    ended, own, _ = await _run(warm, tmp_path, log_store, _facts, memory_bytes=256 << 20, cpu_millis=500)
    assert TaskExit(0) == ended
    groups = [line.split(":", 2) for line in read_result(own, RESULT)["cgroup"].splitlines()]
    limited = {controller for _, controllers, path in groups if path.startswith("/iris/task-")
               for controller in (controllers.split(",") if controllers else ["memory", "cpu"])}  # fmt: skip
    assert {"memory", "cpu"} <= limited


@pytest.mark.skipif(CgroupLimits.detect() is None, reason="no writable cgroup hierarchy here (the agent is not root)")
async def test_a_forked_task_killed_by_its_memory_limit_before_it_starts_says_so(
    warm: ProcessRuntime, tmp_path: Path, log_store: LogStore
) -> None:
    """A child the kernel kills for its memory limit before it reports fails to start naming the OOM kill and the
    limit; the start error was a bare "cannot start task"."""
    with pytest.raises(TaskStartError) as info:
        await _run(warm, tmp_path, log_store, _facts, memory_bytes=4096)
    assert str(info.value).startswith("cannot start task: OOM-killed: the task exceeded its memory limit of "), info


@pytest.mark.parametrize(("status", "reason"), [
    (signal.SIGKILL, "its process was killed by SIGKILL before it started"),
    (3 << 8, "its process exited with code 3 before it started"),
])  # fmt: skip
def test_a_child_that_died_before_it_reported_is_described(status: int, reason: str) -> None:
    """The forkserver says how a child that never reported ended (a signal or an exit code), not only that it did."""
    assert reason == _died_unheard(status)


def test_the_runner_reads_its_command_line_without_argparse() -> None:
    """`--x V` and `--x=V` both work; a wrong command line says what is wrong (exit 2 in `main`)."""
    from worker_agent.task_runner import main, parse_args

    expected = {"--store": "file:///s", "--function": "f", "--result": "r"}
    assert expected == parse_args(["--store", "file:///s", "--function=f", "--result", "r"])
    assert "missing --result" == parse_args(["--store", "s", "--function", "f"])
    assert "unknown argument '--help'" == parse_args(["--help"])
    assert "--result needs a value" == parse_args(["--store", "s", "--function", "f", "--result"])
    assert 2 == main(["--bogus"])


def test_fresh_and_warm_start_are_the_same_runner() -> None:
    """The fast path is chosen for exactly this interpreter running the runner module, nothing else."""
    from worker_agent.runtimes.warm import runner_args

    argv = task_runner_argv("file:///s", "f", "r", sys.executable)
    assert ["--store", "file:///s", "--function", "f", "--result", "r"] == runner_args(argv, sys.executable)
    assert runner_args(argv, "/other/python") is None
    assert runner_args(["sh", "-c", "true"], sys.executable) is None
