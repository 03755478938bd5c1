"""Running the `iris` CLI as a user does: a subprocess pointed at the session cluster."""

from __future__ import annotations

import subprocess
import sys

from tests.support import Cluster


def iris(cluster: Cluster, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`iris ARGS...` against `cluster`; its exit code, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "iris", *args], env=cluster.env, capture_output=True, text=True, timeout=timeout
    )
