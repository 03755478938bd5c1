"""A task's own area and, for the process runtime on a shared host, an unprivileged task user."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from worker_agent.runtimes.base import Mount, TaskSpec, TaskStartError
from worker_agent.runtimes.cri_client import CriLogParser
from worker_agent.runtimes.process import ProcessRuntime, TaskUser
from worker_agent.runtimes.select import task_user
from worker_agent.storage import BlobStore, LogStore
from worker_agent.task_area import TaskArea
from worker_agent.task_runner import error_key


def test_task_area_stages_inputs_and_publishes_only_outputs(tmp_path: Path, blob_store: BlobStore) -> None:
    """The area holds a copy of the function blob; only the result and error blobs go back to the store."""
    blob_store.put("jobs/j/function", b"pickled")
    blob_store.put("jobs/other/function", b"someone else's")
    area = TaskArea.at(tmp_path / "tasks", "j", 0, 1)
    area.create()
    area.stage_function(blob_store, "jobs/j/function")
    own = BlobStore(area.store_dir)
    assert b"pickled" == own.get("jobs/j/function")
    assert not own.exists("jobs/other/function")
    own.put("jobs/j/results/task-0/attempt-1", b"result")
    own.put(error_key("jobs/j/results/task-0/attempt-1"), b"why")
    own.put("jobs/other/function", b"overwritten")  # a task writing where it should not
    area.publish_outputs(blob_store, "jobs/j/results/task-0/attempt-1")
    assert b"result" == blob_store.get("jobs/j/results/task-0/attempt-1")
    assert b"why" == blob_store.get(error_key("jobs/j/results/task-0/attempt-1"))
    assert b"someone else's" == blob_store.get("jobs/other/function")
    area.remove()
    assert not area.path.exists()


def test_a_job_leaves_no_directory_behind_once_its_last_area_on_the_host_is_removed(tmp_path: Path) -> None:
    """Two tasks of one job share its directory until both are gone; then the host keeps nothing of it."""
    first, second = TaskArea.at(tmp_path / "tasks", "j", 0, 0), TaskArea.at(tmp_path / "tasks", "j", 1, 0)
    first.create()
    second.create()
    first.remove()
    assert second.work_dir.is_dir()
    second.remove()
    assert [] == list((tmp_path / "tasks").iterdir())
    again = TaskArea.at(tmp_path / "tasks", "j", 0, 1)  # a retry on the same host after that
    again.create()
    assert again.work_dir.is_dir()


@pytest.mark.parametrize("window", ["chmod", "mkdir", "is_dir"])
def test_area_is_made_although_a_sibling_removes_the_empty_job_directory_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: str
) -> None:
    """A sibling task's removal may take the job's empty directory between any two steps of `create`.

    `is_dir`: the job's directory existed when `mkdir(exist_ok=True)` tried it, and was gone when it
    checked (FileExistsError; one task of a 25,000-task job failed on it).
    """
    area = TaskArea.at(tmp_path / "tasks", "j", 1, 0)
    job_dir = area.path.parent
    if window == "is_dir":
        job_dir.mkdir(parents=True)  # a sibling's area was in it a moment ago
    original = getattr(Path, window)
    raced: list[Path] = []

    def sibling_removes_first(self: Path, *args: object, **kwargs: object) -> object:
        target = area.path if window == "mkdir" else job_dir
        if self == target and not raced:
            raced.append(self)
            job_dir.rmdir()  # what `remove` of the job's last other area does, at the worst moment
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, window, sibling_removes_first)
    area.create()
    assert raced, "the race was not staged"
    assert area.work_dir.is_dir() and area.store_dir.is_dir()
    assert 0o711 == stat.S_IMODE(job_dir.stat().st_mode)


def test_task_area_directories_hide_neighbours(tmp_path: Path) -> None:
    """Parents are traverse-only (0711) and each area is private (0700), even for a hostile job name."""
    area = TaskArea.at(tmp_path / "tasks", "../../etc", 3, 0)
    area.create()
    assert area.path.is_relative_to(tmp_path / "tasks")
    assert 0o711 == stat.S_IMODE((tmp_path / "tasks").stat().st_mode)
    assert 0o711 == stat.S_IMODE(area.path.parent.stat().st_mode)
    assert 0o700 == stat.S_IMODE(area.path.stat().st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="running tasks as another user needs root")
async def test_process_tasks_run_as_the_task_user(tmp_path: Path, log_store: LogStore) -> None:
    """As root, a task runs as `nobody`: it writes its own area but cannot read the agent's files."""
    secret = tmp_path / "agent-only"
    secret.write_text("store contents")
    secret.chmod(0o600)
    area = TaskArea.at(tmp_path / "tasks", "job", 0, 0)
    area.create()
    runtime = ProcessRuntime(run_as=TaskUser.lookup("nobody"))
    spec = TaskSpec(
        argv=["sh", "-c", f"id -u; echo ok > out; cat {secret} || echo denied"],
        log=log_store.open_writer("job", 0, 0),
        cwd=str(area.work_dir),
        mounts=[Mount(str(area.path), read_only=False)],
    )
    handle = await runtime.start(spec)
    assert 0 == (await runtime.wait(handle)).exit_code
    lines = log_store.read_lines("job", 0)
    assert str(TaskUser.lookup("nobody").uid) == lines[0]
    assert "denied" == lines[-1]
    assert "ok\n" == (area.work_dir / "out").read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="running tasks as another user needs root")
async def test_task_user_has_its_own_group_only(tmp_path: Path, log_store: LogStore) -> None:
    """The task runs with the user's uid and gid and no supplementary group (none of the agent's)."""
    area = TaskArea.at(tmp_path / "tasks", "job", 0, 0)
    area.create()
    user = TaskUser.lookup("nobody")
    runtime = ProcessRuntime(run_as=user)
    spec = TaskSpec(argv=["sh", "-c", "id -u; id -g; id -G"], log=log_store.open_writer("job", 0, 0),
                    cwd=str(area.work_dir), mounts=[Mount(str(area.path), read_only=False)])  # fmt: skip
    handle = await runtime.start(spec)
    assert 0 == (await runtime.wait(handle)).exit_code
    assert [str(user.uid), str(user.gid), str(user.gid)] == log_store.read_lines("job", 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="running tasks as another user needs root")
async def test_executable_only_root_may_run_is_refused_at_start(tmp_path: Path, log_store: LogStore) -> None:
    """A program the agent could run but the task user cannot is a start error naming it, not an exit code."""
    area = TaskArea.at(tmp_path / "tasks", "job", 0, 0)
    area.create()
    script = tmp_path / "root-only.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o700)
    runtime = ProcessRuntime(run_as=TaskUser.lookup("nobody"))
    spec = TaskSpec(argv=[str(script)], log=log_store.open_writer("job", 0, 0), cwd=str(area.work_dir),
                    mounts=[Mount(str(area.path), read_only=False)])  # fmt: skip
    with pytest.raises(TaskStartError) as info:
        await runtime.start(spec)
    assert f"cannot start task: permission denied running {str(script)!r}" == str(info.value)


def test_task_user_setting() -> None:
    """'auto' is nobody for a root agent and the agent's own user otherwise; '' is always the agent's."""
    assert task_user("") is None
    expected = TaskUser.lookup("nobody") if os.geteuid() == 0 else None
    assert expected == task_user("auto")
    with pytest.raises(ValueError, match="task user 'no-such-user-x' does not exist"):
        task_user("no-such-user-x")


def test_cri_log_records_become_the_tasks_bytes() -> None:
    """Full records end lines, partial ones join the next, records split across reads are kept whole."""
    parser = CriLogParser()
    data = (
        b"2026-01-01T00:00:00.000000001Z stdout F hello world\n"
        b"2026-01-01T00:00:00.000000002Z stderr P a long \n"
        b"2026-01-01T00:00:00.000000003Z stderr F line\n"
        b"2026-01-01T00:00:00.000000004Z stdout F  two  spaces\n"
    )
    out = parser.feed(data[:30]) + parser.feed(data[30:100]) + parser.feed(data[100:]) + parser.finish()
    assert b"hello world\na long line\n two  spaces\n" == out


def test_runner_code_is_staged_once_and_importable(tmp_path: Path) -> None:
    """The staged copy holds the runner and cloudpickle, is reused, and imports without the agent's install."""
    import subprocess
    import sys

    from worker_agent.task_area import stage_runner_code

    staged = stage_runner_code(tmp_path)
    assert staged == stage_runner_code(tmp_path)
    probe = (
        f"import sys; sys.path.insert(0, {str(staged)!r});"
        "import worker_agent.task_runner, cloudpickle; print(worker_agent.task_runner.__file__, cloudpickle.__file__)"
    )
    result = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, check=True)
    runner_file, pickle_file = result.stdout.split()
    assert runner_file.startswith(str(staged))
    assert pickle_file.startswith(str(staged))


def test_staged_runner_code_carries_bytecode_its_python_loads(tmp_path: Path) -> None:
    """Each staged module has a .pyc this interpreter accepts (magic, source mtime and size), readable by all:
    a container's Python of this version never compiles the runner or cloudpickle from source."""
    import importlib.util
    import struct

    from worker_agent.task_area import stage_runner_code

    staged = stage_runner_code(tmp_path)
    sources = sorted(staged.rglob("*.py"))
    assert {"task_runner.py", "blob_files.py", "shipped_call.py", "cloudpickle.py"} <= {s.name for s in sources}
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        header = cached.read_bytes()[:16]
        flags, mtime, size = struct.unpack("<III", header[4:16])
        assert importlib.util.MAGIC_NUMBER == header[:4], cached
        assert (0, int(source.stat().st_mtime), source.stat().st_size) == (flags, mtime, size), cached
        assert 0o644 == stat.S_IMODE(cached.stat().st_mode), cached
