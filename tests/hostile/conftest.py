"""The hostile-input suite: the `iris` CLI run as a subprocess, as a new user would, with bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.support import Cluster


def iris(*args: str, env: Mapping[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `python -m iris ARGS` (this source tree's CLI) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "iris", *args], env=dict(env), capture_output=True, text=True, timeout=timeout
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, *fragments: str) -> str:
    """The command exited `code` with exactly one line on stderr, `error: ...`, naming `fragments`; no traceback."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    assert code == result.returncode, (result.returncode, result.stderr)
    assert 1 == len(lines), result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture
def no_cluster_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose IRIS_HOME has never held a cluster, and no --temporal/--store settings."""
    env = {k: v for k, v in os.environ.items() if k not in ("IRIS_TEMPORAL_ADDRESS", "IRIS_STORE")}
    env["IRIS_HOME"] = str(tmp_path / "iris-home")
    return env


@pytest.fixture
def cluster_env(cluster: Cluster) -> dict[str, str]:
    """The environment of a CLI pointed at the session cluster."""
    return cluster.env
