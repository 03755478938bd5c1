"""ManualPlatform end to end: agents started over a real sshd register with the real control plane and run a gang."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.contracts.fleet import ControlPlaneAddress, PlatformState, ScaleGroupSpec
from activities.platforms.manual import ManualPlatform
from activities.platforms.remote_agent import host_key
from iris import Constraint, CoschedulingConfig, IrisClient, JobState, ResourceSpec
from tests.sshd import Sshd, start_sshd, worker_command
from tests.support import Cluster, forget_workers, pid_gone, pid_running, wait_until

TAINT = "taint:manual-e2e"  # keeps the rest of the suite's jobs off these workers


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    server = start_sshd(tmp_path_factory.mktemp("sshd"), hosts=2)
    try:
        yield server
    finally:
        server.close()


def agent_pid(sshd: Sshd, address: str) -> int | None:
    path = sshd.remote_home / "manual" / host_key(address) / "agent.pid"
    return int(path.read_text()) if path.exists() else None


def test_bootstrap_register_run_terminate(
    sshd: Sshd, cluster: Cluster, client: IrisClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """create -> bootstrap over SSH (one host named `localhost:PORT`) -> both agents register with the slice's
    attributes -> a gang runs on them -> bootstrap again changes nothing -> terminate stops the agents
    (processes gone) and frees the hosts."""
    monkeypatch.setenv("IRIS_HOME", str(tmp_path / "controller-home"))
    group = ScaleGroupSpec(
        name="ssh-pool", platform="manual", hosts_per_slice=2, cpu_millis=1000, memory_bytes=1 << 30,
        attributes={"pool": "ssh", TAINT: True},
        # one host by name, as SSH users usually write them, one by address
        settings={"hosts": [f"localhost:{sshd.ports[0]}", sshd.hosts[1]], "user": sshd.user,
                  "identity_file": str(sshd.client_key),
                  "worker_command": worker_command()},
    )
    control = ControlPlaneAddress(cluster.info.address, "default", cluster.info.store_url)
    platform = ManualPlatform(group)
    slice_id = "ssh-pool-e2e"

    started = time.monotonic()
    info = asyncio.run(platform.create_slice(slice_id, group))
    assert PlatformState.READY == info.state
    asyncio.run(platform.bootstrap(slice_id, group, control))
    try:
        def registered() -> dict[str, dict[str, object]] | None:
            workers = {w.worker_id: w.attributes for w in client.list_workers() if w.healthy}
            mine = {k: v for k, v in workers.items() if k.startswith(slice_id)}
            return mine if len(mine) == 2 else None

        workers = wait_until(registered, timeout=90, interval=0.5, what="both SSH-started agents registered")
        print(f"manual slice create -> 2 agents registered over SSH: {time.monotonic() - started:.1f} s")
        for index in (0, 1):
            attrs = workers[f"{slice_id}-{index}"]
            assert (slice_id, index, slice_id, "ssh-pool", "ssh") == (
                attrs["tpu-name"], attrs["tpu-worker-id"], attrs["iris-slice-id"], attrs["iris-scale-group"],
                attrs["pool"],
            )
        pids = {h.address: agent_pid(sshd, h.address) for h in info.hosts}
        assert all(pid is not None and pid_running(pid) for pid in pids.values())

        job = client.submit_command(
            ["sh", "-c", 'echo "$IRIS_TASK_INDEX $IRIS_WORKER_ID"'],
            resources=ResourceSpec(cpu=1, memory="512m", replicas=2),
            coscheduling=CoschedulingConfig("tpu-name"), constraints=[Constraint(TAINT, "EXISTS")],
        )
        status = job.wait(timeout=90)
        assert JobState.SUCCEEDED == status.state
        assert [f"{slice_id}-0", f"{slice_id}-1"] == [t.worker_id for t in status.tasks]

        asyncio.run(platform.bootstrap(slice_id, group, control))  # already running: a no-op
        assert pids == {h.address: agent_pid(sshd, h.address) for h in info.hosts}
        described = asyncio.run(ManualPlatform(group).describe(slice_id))
        assert described is not None and ["agent running"] * 2 == [h.state for h in described.hosts]
        assert [(h.index, h.address) for h in info.hosts] == [(h.index, h.address) for h in described.hosts]
    finally:
        asyncio.run(platform.terminate(slice_id))
        forget_workers(cluster, [f"{slice_id}-0", f"{slice_id}-1"])
    for pid in pids.values():
        assert pid is not None
        wait_until(lambda p=pid: pid_gone(p), timeout=30, what=f"agent {pid} gone")
    assert [] == asyncio.run(platform.list_slices({"iris-scale-group": "ssh-pool"}))
    assert all(agent_pid(sshd, h.address) is None for h in info.hosts)

