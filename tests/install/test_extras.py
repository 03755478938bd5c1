"""A base install (`pip install -e .`) runs the local cluster; a platform, runtime or store needs its extra.

Each case runs in a fresh interpreter whose import system refuses the optional clients, as a
machine without the extra would, and checks what a user would meet: a one-line error naming
`pip install 'iris[<extra>]'`, or (for the base path) no error at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The top-level modules each extra brings; the base install has none of them.
OPTIONAL = ["google.cloud.tpu_v2", "google.api_core", "kubernetes", "asyncssh", "docker", "grpc", "s3fs", "gcsfs"]

BLOCKER = textwrap.dedent(
    f"""
    import importlib.abc, sys

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == m or name.startswith(m + ".") for m in {OPTIONAL!r}):
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    """
)


def run_without_extras(body: str) -> str:
    """Run `body` where no optional client can be imported; its stdout (the test fails on a crash)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(body)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False,
    )
    assert 0 == done.returncode, done.stderr
    return done.stdout.strip()


def test_the_local_cluster_path_needs_no_extra() -> None:
    out = run_without_extras(
        """
        import iris, iris.cli.main, iris.client.iris_client, iris.controller.control_plane, iris.local.cluster
        import worker_agent.agent
        from activities.platforms import platform_class
        from iris.config.cluster_file import default_config
        from worker_agent.runtimes.select import RuntimeOptions
        print(platform_class("local").__name__, type(default_config()).__name__)
        """
    )
    assert "LocalPlatform ClusterConfig" == out


@pytest.mark.parametrize(("platform", "extra"), [("gcp", "gcp"), ("coreweave", "coreweave"), ("manual", "ssh")])
def test_a_platform_without_its_extra_names_it(platform: str, extra: str) -> None:
    out = run_without_extras(
        f"""
        from activities.platforms import platform_class
        try:
            platform_class({platform!r})
        except ValueError as e:
            print(e)
        """
    )
    assert 1 == len(out.splitlines()), out
    assert out.startswith(f"platform: {platform!r} needs the {extra!r} extra: pip install 'iris[{extra}]'"), out


@pytest.mark.parametrize("runtime", ["docker", "containerd"])
def test_a_runtime_without_its_extra_names_it(runtime: str, tmp_path: Path) -> None:
    out = run_without_extras(
        f"""
        from pathlib import Path
        from worker_agent.runtimes.select import RuntimeOptions, make_runtime
        try:
            make_runtime({runtime!r}, RuntimeOptions(worker_id="w", ledger_dir=Path({str(tmp_path)!r})))
        except ValueError as e:
            print(e)
        """
    )
    assert 1 == len(out.splitlines()), out
    assert out.startswith(f"--runtime: {runtime} needs the {runtime!r} extra: pip install 'iris[{runtime}]'"), out


@pytest.mark.parametrize(("url", "extra"), [("s3://bucket/iris", "s3"), ("gs://bucket/iris", "gcs")])
def test_a_store_without_its_extra_names_it(url: str, extra: str) -> None:
    out = run_without_extras(
        f"""
        from worker_agent.object_store import open_blob_store
        try:
            open_blob_store({url!r}, key=None)
        except ValueError as e:
            print(e)
        """
    )
    assert 1 == len(out.splitlines()), out
    assert f"needs the {extra!r} extra: pip install 'iris[{extra}]'" in out, out


def test_iris_build_without_the_docker_extra_names_it() -> None:
    out = run_without_extras(
        """
        from iris.deploy.build import BuildError, _api
        try:
            _api(None)
        except BuildError as e:
            print(e)
        """
    )
    assert "iris build needs the 'docker' extra: pip install 'iris[docker]' (no module 'docker')" == out
