"""The whole fleet path over SSH: a controller with `platform: manual` and `platform: gcp` scale groups, the
autoscaler, SliceWorkflow, agents started over a real sshd, a coscheduled job, and scale-down when idle.

One sshd on loopback serves both: two ports are the manual pool's two hosts; a third is the
port every TPU VM of the fake TPU API is reached on. The "VMs" find this venv's `iris` on
PATH and the fake metadata server through $GCE_METADATA_HOST, as on a TPU VM.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from activities.platforms.remote_agent import host_key
from iris import Constraint, CoschedulingConfig, IrisClient, JobState, ResourceSpec
from iris.config import parse_config
from iris.local_cluster import LocalCluster
from tests.platforms.tpu_fake import FakeMetadata, FakeTpu, tpu_vm_attributes
from tests.sshd import Sshd, start_sshd, worker_command
from tests.support import Cluster, pid_gone, wait_until

pytestmark = pytest.mark.e2e


@dataclass
class SshFleet:
    cluster: Cluster
    client: IrisClient
    sshd: Sshd
    tpu: FakeTpu


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshFleet]:
    """A local cluster with no fixed workers and two scale groups reached over SSH (empty at start)."""
    home = tmp_path_factory.mktemp("iris-ssh-fleet")
    metadata = FakeMetadata(tpu_vm_attributes("any", "v4-16", "2x2x2", worker=0, vms=2))
    tpu = FakeTpu().start()
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "GCE_METADATA_HOST": metadata.host}
    sshd = start_sshd(tmp_path_factory.mktemp("sshd"), hosts=3, env=env)
    manual_hosts, tpu_port = sshd.hosts[:2], sshd.ports[2]
    common = {"min_slices": 0, "max_slices": 1, "resources": {"cpu": 1, "memory": "1g"},
              "scale_up_delay": "0s", "scale_down_delay": "3s"}
    config = {
        "local": {"worker_groups": []},
        "scale_groups": [
            {"name": "ssh-pool", "platform": "manual", "hosts_per_slice": 2, "attributes": {"pool": "ssh"},
             "manual": {"hosts": manual_hosts, "user": sshd.user, "identity_file": str(sshd.client_key),
                        "worker_command": worker_command()}, **common},
            {"name": "tpu-v4-16", "platform": "gcp", "hosts_per_slice": 2, "attributes": {"tpu-topology": "v4-16"},
             "gcp": {"project": "proj", "zone": "us-central2-b", "accelerator_type": "v4-16",
                     "runtime_version": "tpu-ubuntu2204-base", "api_endpoint": tpu.endpoint,
                     "ssh": {"user": sshd.user, "identity_file": str(sshd.client_key), "port": tpu_port}}, **common},
        ],
    }
    local = LocalCluster(home)
    try:
        info = local.up(parse_config(config, "ssh fleet test cluster"))
        cluster = Cluster(local, info)
        yield SshFleet(cluster, IrisClient.connect(info.address, store=info.store_url), sshd, tpu)
    finally:
        local.down()
        sshd.stop()
        tpu.stop()
        metadata.stop()


def agent_pids(sshd: Sshd, kind: str) -> list[int]:
    return [int(p.read_text()) for p in sorted((sshd.remote_home / kind).glob("*/agent.pid"))]


def test_manual_group_grows_for_a_gang_and_shrinks_when_idle(fleet: SshFleet) -> None:
    """A coscheduled 2-task job on the empty manual group: a slice is claimed over SSH, its agents run the job,
    and after scale_down_delay the idle slice's agents are stopped and its hosts freed."""
    submitted = time.monotonic()
    job = fleet.client.submit_command(
        ["sh", "-c", 'echo "$IRIS_TASK_INDEX"'], resources=ResourceSpec(cpu=1, memory="512m", replicas=2),
        coscheduling=CoschedulingConfig("tpu-name"), constraints=[Constraint("pool", "EQ", "ssh")],
    )
    status = job.wait(timeout=240)
    ran = time.monotonic()
    assert JobState.SUCCEEDED == status.state
    slice_id = status.tasks[0].worker_id.removesuffix("-0")
    assert slice_id.startswith("ssh-pool-")
    assert [f"{slice_id}-0", f"{slice_id}-1"] == [t.worker_id for t in status.tasks]
    claims = sorted((fleet.sshd.remote_home / "manual").glob("*/claim.json"))
    assert sorted(host_key(h) for h in fleet.sshd.hosts[:2]) == sorted(p.parent.name for p in claims)
    pids = agent_pids(fleet.sshd, "manual")
    assert 2 == len(pids)

    wait_until(lambda: all(pid_gone(p) for p in pids), timeout=120, what="the idle slice's agents stopped")
    wait_until(lambda: not list((fleet.sshd.remote_home / "manual").glob("*/claim.json")), timeout=60,
               what="the hosts freed")
    gone = time.monotonic()
    print(f"manual slice: empty group -> gang done {ran - submitted:.1f} s; done -> agents stopped {gone - ran:.1f} s")


def test_gcp_group_grows_for_a_tpu_gang_and_deletes_the_node_when_idle(fleet: SshFleet) -> None:
    """A coscheduled v4-16 job on the empty gcp group: a TPU node is created through the API, its VMs' agents
    (started over SSH, TPU facts from the metadata server) run the job, and the idle node is deleted."""
    submitted = time.monotonic()
    job = fleet.client.submit_command(
        ["sh", "-c", 'echo "$IRIS_TASK_INDEX"'], resources=ResourceSpec(cpu=1, memory="512m", replicas=2),
        coscheduling=CoschedulingConfig("tpu-name"), constraints=[Constraint("tpu-topology", "EQ", "v4-16")],
    )
    status = job.wait(timeout=240)
    ran = time.monotonic()
    assert JobState.SUCCEEDED == status.state
    slice_id = status.tasks[0].worker_id.removesuffix("-0")
    assert slice_id.startswith("tpu-v4-16-")
    workers = {w.worker_id: w.attributes for w in fleet.client.list_workers()}
    assert ("v4-16", "2x2x2", 2) == tuple(
        workers[f"{slice_id}-1"][k] for k in ("tpu-accelerator-type", "tpu-chip-topology", "tpu-vm-count")
    )
    pids = agent_pids(fleet.sshd, "gcp")
    assert 2 == len(pids)

    wait_until(lambda: not fleet.tpu.nodes, timeout=120, what="the idle slice's node deleted")
    gone = time.monotonic()
    wait_until(lambda: all(pid_gone(p) for p in pids), timeout=60, what="its agents stopped")
    print(f"gcp slice: empty group -> gang done {ran - submitted:.1f} s; done -> node deleted {gone - ran:.1f} s")
    creates = [r for m, r in fleet.tpu.requests if m == "CreateNode"]
    assert 1 == len(creates)
    assert {"iris-managed": "true", "iris-scale-group": "tpu-v4-16", "iris-slice-id": slice_id} == dict(
        creates[0].node.labels
    )
    assert 1 == fleet.tpu.methods().count("DeleteNode")
