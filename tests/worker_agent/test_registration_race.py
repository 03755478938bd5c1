"""An agent whose session the server ends while it is still registering it registers again at once.

Seen after a dev-server restart: the agent's registration was under way when the server came back and
timed the new session out; the agent then took the scheduler's answer as success, forgot the loss, and
stayed unhealthy until it had heard nothing for the silence limit (45 s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from worker_agent import agent as agent_module
from worker_agent.agent import WorkerAgent
from worker_agent.agent_config import AgentConfig


async def test_a_session_lost_during_its_registration_is_still_lost_once_registered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await Client.connect("127.0.0.1:1", lazy=True)  # never dialled: the scheduler's answer is given below
    agent = WorkerAgent(client, AgentConfig(
        worker_id="w-race", store_url=(tmp_path / "store").as_uri(), cpu_millis=1000, memory_bytes=2**30,
        state_dir=tmp_path / "state",
    ))  # fmt: skip

    async def answered_after_the_session_ended(*args: Any, **kwargs: Any) -> dict[str, str]:
        agent._session_lost.set()  # what worker_session does when the server cancels the session meanwhile
        return {}  # then the scheduler's answer: registered, nothing refused

    monkeypatch.setattr(agent_module, "register_hosts", answered_after_the_session_ended)
    assert await agent.register()
    assert agent._session_lost.is_set()  # the supervising loop registers a new session at once
