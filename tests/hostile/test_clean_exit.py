"""A command that succeeded exits 0 every time: no crash of the Temporal SDK's threads at interpreter exit.

The crash (`Fatal Python error: PyGILState_Release`, exit 134, once 4 of 27 `iris cluster up` runs) comes
from the SDK's runtime threads calling into an interpreter that finalizes under them: any command that
connected to Temporal could hit it, so most of the exits asked for here are `iris job list` against a
running cluster (under a second each), with a few whole `up`/`down` cycles (eleven seconds each) beside.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .conftest import iris

CYCLES = 3
"""`iris cluster up`/`down` cycles per home."""
READS = 16
"""`iris job list` runs per home, against the cluster of its first cycle."""
HOMES = 2
"""The commands run in two IRIS_HOMEs at once, to halve the wall time (and to exit under load, as users do)."""
NO_WORKERS = "local:\n  worker_groups: []\n"
"""Temporal and the controller only: the crash is in the CLI process, whatever the fleet."""


def _commands(env: dict[str, str], config: Path) -> list[str]:
    """Run one home's commands; what failed, each in one line."""
    up, down, read = ["cluster", "up", "--config", str(config)], ["cluster", "down"], ["job", "list"]
    commands = [up, *([read] * READS), down, *([up, down] * (CYCLES - 1))]
    failures = []
    try:
        for i, args in enumerate(commands):
            result = iris(*args, env=env, timeout=180)
            if result.returncode != 0 or "Fatal Python error" in result.stderr:
                failures.append(f"{env['IRIS_HOME']} command {i} `{' '.join(args[:2])}`: "
                                f"exit {result.returncode}: {result.stderr[-500:]}")  # fmt: skip
    finally:
        iris("cluster", "down", env=env)
    return failures


def test_commands_that_connect_to_temporal_exit_cleanly_every_time(
    no_cluster_env: dict[str, str], tmp_path: Path
) -> None:
    """38 commands that connect to Temporal (6 `iris cluster up`, 32 `iris job list`; 30 `up`s before) and
    the 6 `iris cluster down`s: every one exits 0 and none prints `Fatal Python error`."""
    config = tmp_path / "cluster.yaml"
    config.write_text(NO_WORKERS)
    envs = [{**no_cluster_env, "IRIS_HOME": str(tmp_path / f"home-{i}")} for i in range(HOMES)]
    with ThreadPoolExecutor(HOMES) as pool:
        results = list(pool.map(lambda env: _commands(env, config), envs))
    assert [] == [failure for failures in results for failure in failures]
