"""A command that succeeded exits 0 every time: no crash of the Temporal SDK's threads at interpreter exit."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .conftest import iris

CYCLES = 30
HOMES = 2
"""The cycles run in two IRIS_HOMEs at once, to halve the wall time (and to exit under load, as users do)."""
NO_WORKERS = "local:\n  worker_groups: []\n"
"""Temporal and the controller only: the crash is in the CLI process, whatever the fleet."""


def _cycles(env: dict[str, str], config: Path, count: int) -> list[str]:
    failures = []
    try:
        for cycle in range(count):
            for args in (["cluster", "up", "--config", str(config)], ["cluster", "down"]):
                result = iris(*args, env=env, timeout=180)
                if result.returncode != 0 or "Fatal Python error" in result.stderr:
                    failures.append(f"{env['IRIS_HOME']} cycle {cycle} `{' '.join(args[:2])}`: "
                                    f"exit {result.returncode}: {result.stderr[-500:]}")
    finally:
        iris("cluster", "down", env=env)
    return failures


def test_cluster_up_and_down_exit_cleanly_every_time(no_cluster_env: dict[str, str], tmp_path: Path) -> None:
    """30 `iris cluster up`/`down` cycles: every one exits 0 and none prints `Fatal Python error`."""
    config = tmp_path / "cluster.yaml"
    config.write_text(NO_WORKERS)
    envs = [{**no_cluster_env, "IRIS_HOME": str(tmp_path / f"home-{i}")} for i in range(HOMES)]
    with ThreadPoolExecutor(HOMES) as pool:
        results = list(pool.map(lambda env: _cycles(env, config, CYCLES // HOMES), envs))
    assert [] == [failure for failures in results for failure in failures]
