"""An agent that starts before its controller (a cluster coming up starts both at once) asks the scheduler again
often while the server says it does not exist yet, so it registers within a second of the scheduler's start."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.contracts import WorkerSessionInput
from activities.proto import cluster_pb2 as pb
from iris.local.cluster import LocalCluster
from worker_agent import registration
from worker_agent.registration import NOT_STARTED_CAP_SECONDS, register_hosts


def test_an_agent_asks_a_scheduler_not_started_yet_again_at_least_once_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a server with no scheduler, every pause between tries is at most NOT_STARTED_CAP_SECONDS (with the
    general backoff they grew to 5 s, and an agent found a controller that started meanwhile up to 5 s late)."""
    local = LocalCluster(tmp_path / "home")
    local.up(components=("temporal",))
    pauses: list[float] = []
    real_pause = registration.pause

    async def recorded(seconds: float, stop: asyncio.Event | None) -> bool:
        pauses.append(seconds)
        return await real_pause(seconds, stop)

    monkeypatch.setattr(registration, "pause", recorded)

    async def register(address: str) -> None:
        client = await Client.connect(address)
        meta = pb.WorkerMetadata(worker_id="early-0", host="127.0.0.1", agent_session="s0")
        meta.capacity.cpu_millis, meta.capacity.memory_bytes = 1000, 2**30
        session = WorkerSessionInput(worker_id="early-0", session="s0", announced=True)
        with pytest.raises(RuntimeError, match="could not reach the Iris scheduler: SchedulerNotStarted"):
            await register_hosts(client, session, [meta], timeout=5)

    try:
        info = local.status()
        assert info is not None
        asyncio.run(register(info.address))
    finally:
        local.down()
    assert len(pauses) >= 6, pauses
    assert max(pauses) <= NOT_STARTED_CAP_SECONDS, pauses
