"""The controller's build id covers the code that replays, and only that (docs/operators.md, upgrades)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _build_id(tree: Path) -> str:
    """The build id a controller computes from the sources in `tree` (a fresh interpreter, so no cache)."""
    done = subprocess.run(
        [sys.executable, "-c", "from iris.deploy.worker_versioning import code_build_id; print(code_build_id())"],
        cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the control plane's packages to edit."""
    for package in ("iris", "workflows", "activities", "scheduler", "worker_agent"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + line + "\n")


def test_only_what_replays_makes_a_new_build(tree: Path) -> None:
    """An activity no workflow imports (the rebuild asker) or the CLI may change without pinning running jobs
    to the old controllers; a workflow, the contracts and the scheduling functions a workflow calls may not."""
    before = _build_id(tree)
    assert before.startswith("code-")
    _append(tree / "activities" / "recovery.py", "# an activity's body changed")
    _append(tree / "iris" / "cli" / "main.py", "# the CLI changed")
    assert before == _build_id(tree)
    for changed in ("workflows/jobs/job_workflow.py", "activities/contracts/__init__.py",
                    "activities/contracts/fleet.py", "scheduler/placement.py"):
        _append(tree / changed, "# changed")
        after = _build_id(tree)
        assert before != after, changed
        before = after
