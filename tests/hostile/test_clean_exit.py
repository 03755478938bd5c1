"""A command that succeeded exits 0 every time: no crash of the Temporal SDK's threads at interpreter exit."""

from __future__ import annotations

from pathlib import Path

from .conftest import iris

CYCLES = 30
ONE_WORKER = "local:\n  worker_groups:\n    - {name: solo, count: 1, resources: {cpu: 1, memory: 512m}}\n"


def test_cluster_up_and_down_exit_cleanly_every_time(no_cluster_env: dict[str, str], tmp_path: Path) -> None:
    """30 `iris cluster up`/`down` cycles: every one exits 0 and none prints `Fatal Python error`."""
    config = tmp_path / "cluster.yaml"
    config.write_text(ONE_WORKER)
    failures = []
    try:
        for cycle in range(CYCLES):
            for args in (["cluster", "up", "--config", str(config)], ["cluster", "down"]):
                result = iris(*args, env=no_cluster_env, timeout=180)
                if result.returncode != 0 or "Fatal Python error" in result.stderr:
                    failures.append(f"cycle {cycle} `{' '.join(args[:2])}`: exit {result.returncode}: "
                                    f"{result.stderr[-500:]}")
    finally:
        iris("cluster", "down", env=no_cluster_env)
    assert [] == failures
