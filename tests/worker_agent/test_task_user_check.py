"""An agent whose task user cannot run Python or read Iris refuses to start, with one line saying what to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from worker_agent.runtimes.process import TaskUser
from worker_agent.runtimes.task_user_check import task_user_refusal

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="running tasks as another user needs root")


def _python_in_private_dir(tmp_path: Path) -> Path:
    """This interpreter, reached through a directory only root may enter (pyenv in root's home, say)."""
    private = tmp_path / "private"
    private.mkdir()
    private.chmod(0o700)
    link = private / "python"
    link.symlink_to(Path(sys.executable).resolve())
    return link


def test_a_task_user_who_cannot_reach_the_interpreter_is_named(tmp_path: Path) -> None:
    """The refusal names the user, the interpreter, the reason and the two ways out."""
    python = _python_in_private_dir(tmp_path)
    refusal = task_user_refusal(TaskUser.lookup("nobody"), python=str(python))
    assert refusal is not None
    assert refusal.startswith(f"--task-user: tasks would run as 'nobody', who cannot run {python}")
    assert "permission denied" in refusal
    assert "--task-user ''" in refusal


def test_a_task_user_who_can_run_tasks_passes() -> None:
    """An interpreter and code the task user can read: no refusal. The code is a copy where every user may read
    it (the checkout may sit in a directory only root can enter, a clone in root's home, and then the agent
    rightly refuses: `test_code_the_task_user_cannot_read_is_named`)."""
    system_python = Path("/usr/bin/python3")
    if not system_python.exists():
        pytest.skip("no system python3 readable by every user")
    readable = Path(tempfile.mkdtemp(prefix="iris-task-user-"))  # not under pytest's own tmp: that is 0700
    try:
        readable.chmod(0o755)
        for package in ("worker_agent", "activities", "scheduler", "iris"):
            shutil.copytree(ROOT / package, readable / package, ignore=shutil.ignore_patterns("__pycache__"))
        user = TaskUser.lookup("nobody")
        assert task_user_refusal(user, python=str(system_python), code_root=readable) is None
    finally:
        shutil.rmtree(readable)


def test_code_the_task_user_cannot_read_is_named(tmp_path: Path) -> None:
    """Iris's code behind a directory only root may enter: the refusal names the code's place."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    shutil.copytree(ROOT / "worker_agent", private / "worker_agent", ignore=shutil.ignore_patterns("__pycache__"))
    system_python = Path("/usr/bin/python3")
    if not system_python.exists():
        pytest.skip("no system python3 readable by every user")
    refusal = task_user_refusal(TaskUser.lookup("nobody"), python=str(system_python), code_root=private)
    assert refusal is not None
    assert f"read Iris's code in {private}" in refusal


def test_worker_serve_refuses_to_start_with_one_line(cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`iris worker serve` as root, tasks as `nobody` who cannot run its interpreter: exit 2, one line on stderr,
    no traceback, and the agent never registered."""
    python = _python_in_private_dir(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IRIS_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [str(python), "-m", "iris", "worker", "serve", "--worker-id", "unreachable-python", "--memory", "1g",
         "--temporal", cluster.info.address, "--store", cluster.info.store_url],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert 2 == done.returncode, done.stderr
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert 1 == len(lines), done.stderr
    assert "--task-user: tasks would run as 'nobody'" in lines[0]
    assert "Traceback" not in done.stderr
