"""`iris worker serve --runtime ...`: a wrong name or an engine that does not answer is one line, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

RES = {"resources": {"cpu": 1, "memory": "1g"}}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--runtime", "warp"], "--runtime: must be one of process, docker, containerd, got 'warp'"),
        (["--runtime", "docker", "--docker-host", "unix:///nonexistent/docker.sock"], "--docker-host: cannot reach"),
        (
            ["--runtime", "containerd", "--containerd-socket", "/nonexistent/containerd.sock"],
            "--containerd-socket: no CRI answers at /nonexistent/containerd.sock",
        ),
    ],
    ids=["unknown-runtime", "docker-unreachable", "containerd-unreachable"],
)
def test_worker_serve_refuses_a_runtime_it_cannot_use(args: list[str], expected: str) -> None:
    """The agent does not start; stderr is one line naming the option, without a traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "iris", "worker", "serve", *args, "--temporal", "127.0.0.1:1", "--store", "/tmp/x"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert 2 == result.returncode, result.stderr
    assert expected in result.stderr
    assert 1 == len(result.stderr.strip().splitlines()), result.stderr
    assert "Traceback" not in result.stderr


def test_config_takes_runtime_and_image_for_worker_and_scale_groups() -> None:
    """`runtime:` and `image:` reach the local workers and the scale group; a bad runtime names the field."""
    from iris.config.cluster_file import Runtime, parse_config

    config = parse_config(
        {
            "local": {"worker_groups": [{"name": "boxed", "runtime": "docker", "image": "python:3.11", **RES}]},
            "scale_groups": [
                {"name": "h100", "platform": "local", "max_slices": 1, "runtime": "containerd", "image": "img:1", **RES}
            ],
        },
        "c.yaml",
    )
    [worker] = config.local_workers()
    assert (Runtime.DOCKER, "python:3.11") == (worker.runtime, worker.image)
    [group] = config.scale_groups
    assert (Runtime.CONTAINERD, "img:1") == (group.runtime, group.image)
    with pytest.raises(ValueError, match=r"c.yaml: local.worker_groups\[0\].*runtime: must be one of process"):
        parse_config({"local": {"worker_groups": [{"name": "w", "runtime": "podman", **RES}]}}, "c.yaml")
