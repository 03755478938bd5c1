"""A team-mode controller tells the agents it bootstraps on any platform where their tasks reach the Iris API.

The address is the operator's `IRIS_TASK_API` on the controller (hosts elsewhere cannot use the loopback one a
controller makes up for its local agents); the SSH/GCP start script exports it, run here by a real shell.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from activities.platforms.remote_agent import start_script
from iris.connection import TemporalSettings
from iris.controller.control_plane import agent_address

SETTINGS = TemporalSettings(address="10.0.0.5:7233", namespace="lab")


def test_team_mode_hands_the_operators_api_address_to_the_agents_of_every_platform(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IRIS_TASK_API", "http://10.0.0.5:8080")
    control = agent_address(SETTINGS, "lab", "gs://bucket/iris", team=True)
    agent = tmp_path / "agent.sh"  # stands for `iris worker serve`: records what it was started with, stays up
    agent.write_text(f'env > {tmp_path}/env.txt; echo "$@" > {tmp_path}/argv.txt; sleep 5\n')
    script = start_script(str(tmp_path / "run"), f"sh {agent}", ["--worker-id", "w-0"], control)
    try:
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    finally:
        with contextlib.suppress(OSError, ValueError):  # the agent runs in a session of its own: stop all of it
            os.killpg(int((tmp_path / "run" / "agent.pid").read_text()), signal.SIGKILL)
    env = dict(line.split("=", 1) for line in (tmp_path / "env.txt").read_text().splitlines() if "=" in line)
    assert ("http://10.0.0.5:8080", "10.0.0.5:7233", "gs://bucket/iris") == (
        env.get("IRIS_TASK_API"), env.get("IRIS_TEMPORAL_ADDRESS"), env.get("IRIS_STORE"))  # fmt: skip


def test_without_team_mode_or_without_an_operators_address_agents_get_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_TASK_API", "http://10.0.0.5:8080")
    assert {} == agent_address(SETTINGS, "lab", "file:///s", team=False).extra_env
    monkeypatch.delenv("IRIS_TASK_API")
    assert {} == agent_address(SETTINGS, "lab", "file:///s", team=True).extra_env
