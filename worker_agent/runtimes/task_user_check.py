"""Whether the task user can run tasks at all: the interpreter and Iris's code must be readable to it.

An agent started as root runs process tasks as `nobody` unless told otherwise. On a host whose Python
lives under a directory `nobody` cannot enter (pyenv in root's home, a clone in a 0700 directory), every
task then fails on its own with an unrelated error ("No module named 'pkgutil'", a permission error),
and nothing says why. The agent checks once at start, as the task user, and refuses to start with one
line saying what to do; a slice's bootstrap then fails with that line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from worker_agent.runtimes.process import TaskUser

SOURCE_ROOT = Path(__file__).resolve().parents[2]
# What a task's first moments need: the runner itself, and a stdlib module no agent has loaded before.
PROBE = "import worker_agent.task_runner, pkgutil, json"


def task_user_problem(user: TaskUser, python: str = sys.executable, code_root: Path = SOURCE_ROOT) -> str | None:
    """None when `user` can run `python` and import Iris from `code_root`; else why not, in a few words."""
    env = {"PATH": os.defpath, "PYTHONPATH": str(code_root), "LANG": "C.UTF-8", "HOME": "/"}
    try:
        done = subprocess.run(
            [python, "-c", PROBE],
            user=user.uid, group=user.gid, extra_groups=[], env=env, cwd="/", capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
    except PermissionError:
        return "permission denied"
    except OSError as err:
        return str(err.strerror or err)
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"the interpreter exited with {done.returncode}"


def task_user_refusal(user: TaskUser, python: str = sys.executable, code_root: Path = SOURCE_ROOT) -> str | None:
    """The agent's one-line refusal to start, or None when the task user can run tasks."""
    problem = task_user_problem(user, python, code_root)
    if problem is None:
        return None
    return (
        f"--task-user: tasks would run as {user.name!r}, who cannot run {python} or read Iris's code in "
        f"{code_root} ({problem}); start the agent with --task-user '' (tasks run as the agent's user) or "
        f"install Python and Iris where {user.name!r} can read them"
    )
