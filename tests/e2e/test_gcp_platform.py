"""GcpPlatform end to end: the real TPU client against a fake TPU API, VMs reached over a real sshd on
loopback, agents that read their TPU facts from a fake metadata server and register with the real control plane."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.contracts.fleet import ControlPlaneAddress, PlatformState, ScaleGroupSpec
from activities.platforms.gcp import GcpPlatform
from activities.platforms.remote_agent import host_key
from iris import Constraint, CoschedulingConfig, IrisClient, JobState, ResourceSpec
from tests.platforms.tpu_fake import FakeMetadata, FakeTpu, tpu_vm_attributes
from tests.sshd import Sshd, start_sshd
from tests.support import Cluster, forget_workers, pid_gone, wait_until

TAINT = "taint:gcp-e2e"  # keeps the rest of the suite's jobs off these workers
SLICE = "tpu-v4-16-e2e"


@pytest.fixture(scope="module")
def metadata() -> Iterator[FakeMetadata]:
    server = FakeMetadata(tpu_vm_attributes(SLICE, "v4-16", "2x2x2", worker=0, vms=2))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory, metadata: FakeMetadata) -> Iterator[Sshd]:
    # a plain session: the gcp block's `worker_command` and `env` give the agent this venv's `iris` and the
    # metadata server's address ($GCE_METADATA_HOST, as google-auth reads it)
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def fake_tpu() -> Iterator[FakeTpu]:
    fake = FakeTpu().start()
    try:
        yield fake
    finally:
        fake.stop()


def test_tpu_slice_bootstrap_register_run_delete(
    sshd: Sshd, metadata: FakeMetadata, fake_tpu: FakeTpu, cluster: Cluster, client: IrisClient, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """create (in the second zone: the first is stocked out) -> READY -> agents started over SSH register
    with the TPU facts from the metadata server and their zone -> a coscheduled job runs on the slice ->
    terminate stops the agents and deletes the node, whose id names its zone."""
    monkeypatch.setenv("IRIS_HOME", str(tmp_path / "controller-home"))
    group = ScaleGroupSpec(
        name="tpu-v4-16", platform="gcp", hosts_per_slice=2, cpu_millis=1000, memory_bytes=1 << 30,
        attributes={TAINT: True},
        settings={"project": "proj", "zones": ["us-central2-a", "us-central2-b"], "accelerator_type": "v4-16",
                  "runtime_version": "tpu-ubuntu2204-base", "api_endpoint": fake_tpu.endpoint,
                  "ssh": {"user": sshd.user, "identity_file": str(sshd.client_key), "port": sshd.ports[0]},
                  "worker_command": f"{sys.executable} -m iris worker serve --task-user ''",
                  "env": {"GCE_METADATA_HOST": metadata.host}},
    )
    control = ControlPlaneAddress(cluster.info.address, "default", cluster.info.store_url)
    platform = GcpPlatform(group)
    fake_tpu.create_errors["us-central2-a"] = (8, "There is no more capacity in the zone us-central2-a")
    started = time.monotonic()
    info = asyncio.run(platform.create_slice(SLICE, group))
    assert (PlatformState.READY, "us-central2-b") == (info.state, info.labels["zone"])
    node = f"{SLICE}-us-central2-b"  # the node's id names its zone
    assert [f"projects/proj/locations/us-central2-b/nodes/{node}"] == list(fake_tpu.nodes)
    asyncio.run(platform.bootstrap(SLICE, group, control))
    pids: list[int] = []
    try:
        def registered() -> dict[str, dict[str, object]] | None:
            mine = {w.worker_id: w.attributes for w in client.list_workers() if w.healthy
                    and w.worker_id.startswith(SLICE)}
            return mine if len(mine) == 2 else None

        workers = wait_until(registered, timeout=90, interval=0.5, what="both TPU VM agents registered")
        print(f"gcp slice create -> 2 agents registered over SSH: {time.monotonic() - started:.1f} s")
        for index in (0, 1):
            attrs = workers[f"{SLICE}-{index}"]
            assert (SLICE, index, "v4-16", "v4-16", "2x2x2", 2, "tpu-v4-16", "us-central2-b") == (
                attrs["tpu-name"], attrs["tpu-worker-id"], attrs["tpu-topology"], attrs["tpu-accelerator-type"],
                attrs["tpu-chip-topology"], attrs["tpu-vm-count"], attrs["iris-scale-group"], attrs["zone"],
            )
            assert "on_demand" == attrs["capacity"]  # the node's capacity, for constraints
        assert any(path.endswith("/tpu-env") for path, _ in metadata.requests)

        job = client.submit_command(
            ["sh", "-c", 'echo "$IRIS_TASK_INDEX"'], resources=ResourceSpec(cpu=1, memory="512m", replicas=2),
            coscheduling=CoschedulingConfig("tpu-name"),
            constraints=[Constraint("tpu-topology", "EQ", "v4-16"), Constraint(TAINT, "EXISTS")],
        )
        status = job.wait(timeout=90)
        assert JobState.SUCCEEDED == status.state
        assert [f"{SLICE}-0", f"{SLICE}-1"] == [t.worker_id for t in status.tasks]
        for index in (0, 1):
            pid_file = sshd.remote_home / "gcp" / host_key(f"{SLICE}-{index}") / "agent.pid"
            pids.append(int(pid_file.read_text()))
    finally:
        asyncio.run(platform.terminate(SLICE))
        forget_workers(cluster, [f"{SLICE}-0", f"{SLICE}-1"])
    for pid in pids:
        wait_until(lambda p=pid: pid_gone(p), timeout=30, what=f"agent {pid} gone")
    assert {} == fake_tpu.nodes
    creates = [r.parent.rsplit("/", 1)[-1] for m, r in fake_tpu.requests if m == "CreateNode"]
    assert ["us-central2-a", "us-central2-b"] == creates  # stocked out in the first, made in the second
    assert "DeleteNode" in fake_tpu.methods()
    known = (tmp_path / "controller-home" / "known_hosts").read_text()
    assert f"[{node}-0]:{sshd.ports[0]} " in known and f"[{node}-1]:{sshd.ports[0]} " in known

