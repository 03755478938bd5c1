"""An agent's kill grace (`iris worker serve --kill-grace`): a killed task's SIGTERM to SIGKILL, validated where it
is set (docs/configuration.md, "Killing a task").

The end-to-end check (a task that ignores SIGTERM is SIGKILLed after the grace its agent was given) is
tests/faults/test_misuse.py::test_task_ignoring_sigterm_is_sigkilled_after_the_grace_period.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import worker_serve_refusal
from worker_agent.agent_config import KILL_GRACE_SECONDS, AgentConfig


def _config(grace: float) -> AgentConfig:
    return AgentConfig(worker_id="w1", store_url="file:///x", cpu_millis=1000, memory_bytes=1 << 30,
                       kill_grace_seconds=grace)  # fmt: skip


def test_the_grace_defaults_to_5_s_and_is_refused_out_of_range_naming_the_flag() -> None:
    """0-300 s (0: SIGKILL at once); the default stays 5 s; the error names the flag and its variable."""
    assert 5.0 == KILL_GRACE_SECONDS == AgentConfig("w1", "file:///x", 1000, 1 << 30).kill_grace_seconds
    assert (0.0, 300.0) == (_config(0).kill_grace_seconds, _config(300).kill_grace_seconds)
    for bad in (-0.1, 300.5, float("nan")):
        with pytest.raises(ValueError, match=r"--kill-grace, IRIS_KILL_GRACE_SECONDS\): must be at least 0 and at "
                                             r"most 300 seconds"):  # fmt: skip
            _config(bad)


@pytest.mark.parametrize(("args", "env"), [(["--kill-grace", "-1"], {}), ([], {"IRIS_KILL_GRACE_SECONDS": "301"})])
def test_worker_serve_refuses_a_bad_kill_grace(args: list[str], env: dict[str, str], tmp_path: Path) -> None:
    """From the flag or the environment: a usage error naming the flag, before anything is reached."""
    stderr = worker_serve_refusal(args, env, tmp_path)
    assert "--kill-grace" in stderr, stderr
