"""The whole fleet path over SSH: a controller with `platform: manual` and `platform: gcp` scale groups, the
autoscaler, SliceWorkflow, agents started over a real sshd, a coscheduled job, and scale-down when idle.

One sshd on loopback serves both: two ports are the manual pool's two hosts; a third is the
port every TPU VM of the fake TPU API is reached on. The "VMs" find this venv's `iris` on
PATH and the fake metadata server through $GCE_METADATA_HOST, as on a TPU VM.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.cloud import tpu_v2
from temporalio.client import Client

from activities.contracts import AUTOSCALER_WORKFLOW_ID, WAKE_AUTOSCALER
from activities.platforms.remote_agent import host_key
from iris import Constraint, CoschedulingConfig, IrisClient, Job, JobState, ResourceSpec
from iris.config.cluster_file import parse_config
from iris.local.cluster import LocalCluster
from tests.platforms.tpu_fake import FakeMetadata, FakeTpu, tpu_vm_attributes
from tests.sshd import Sshd, start_sshd, worker_command
from tests.support import (
    Cluster,
    armed_timers,
    autoscaler_history,
    autoscaler_mark,
    lines,
    pid_gone,
    plans_since,
    wait_until,
)

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
    # The agents on the "VMs" declare a 4 s heartbeat timeout with a 3 s lease and a 1 s margin: a preempted slice's
    # attempts are lost 4 s after their VMs die and may run again at once (lease + margin - timeout = 0: the lease ran
    # out 1 s before, on the one clock of this host, and the watchdog kills at the deadline), not 10 s + 2 s with the
    # defaults. Measured (that test alone, load 4-8, 4 runs each): kill -> the gang running again 6.3-7.4 s; 7.6-10.4 s
    # with a 2 s margin.
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "GCE_METADATA_HOST": metadata.host,
           "IRIS_HEARTBEAT_TIMEOUT_SECONDS": "4", "IRIS_LEASE_SECONDS": "3", "IRIS_LEASE_MARGIN_SECONDS": "1"}
    sshd = start_sshd(tmp_path_factory.mktemp("sshd"), hosts=3, env=env)
    manual_hosts, tpu_port = sshd.hosts[:2], sshd.ports[2]
    common = {"min_slices": 0, "max_slices": 1, "resources": {"cpu": 1, "memory": "1g"},
              "scale_up_delay": "0s", "scale_down_delay": "1s"}
    config = {
        "local": {"worker_groups": []},
        # the default 5 s scan and 10 s back-off only make the tests wait
        "autoscaler": {"scan_interval": "1s", "backoff": "3s"},
        "scale_groups": [
            {"name": "ssh-pool", "platform": "manual", "hosts_per_slice": 2, "attributes": {"pool": "ssh"},
             "manual": {"hosts": manual_hosts, "user": sshd.user, "identity_file": str(sshd.client_key),
                        "worker_command": worker_command()}, **common},
            {"name": "tpu-v4-16", "platform": "gcp", "hosts_per_slice": 2, "attributes": {"tpu-topology": "v4-16"},
             "gcp": {"worker_command": worker_command(),
                     "project": "proj", "zone": "us-central2-b", "accelerator_type": "v4-16",
                     "runtime_version": "tpu-ubuntu2204-base", "api_endpoint": tpu.endpoint,
                     "ssh": {"user": sshd.user, "identity_file": str(sshd.client_key), "port": tpu_port}}, **common},
            # two zones, tried in order; tainted so that only the test that tolerates it lands there
            {"name": "tpu-zonal", "platform": "gcp", "hosts_per_slice": 2,
             "attributes": {"tpu-topology": "v4-16", "taint:zonal": True},
             "gcp": {"worker_command": worker_command(),
                     "project": "proj", "zones": ["europe-west4-a", "us-central1-a"], "accelerator_type": "v4-16",
                     "runtime_version": "tpu-ubuntu2204-base", "api_endpoint": tpu.endpoint,
                     "ssh": {"user": sshd.user, "identity_file": str(sshd.client_key), "port": tpu_port}}, **common},
            # an accelerator type the (fake) TPU API does not offer: every create is refused as invalid
            {"name": "tpu-v9x-8", "platform": "gcp", "hosts_per_slice": 1, "attributes": {"tpu-topology": "v9x-8"},
             "gcp": {"worker_command": worker_command(),
                     "project": "proj", "zone": "us-east5-a", "accelerator_type": "v9x-8",
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
        for pid in agent_pids(sshd, "manual") + agent_pids(sshd, "gcp"):  # agents of slices still up: the "VMs" go
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        sshd.close()
        tpu.stop()
        metadata.stop()


def agent_pids(sshd: Sshd, kind: str) -> list[int]:
    return [int(p.read_text()) for p in sorted((sshd.remote_home / kind).glob("*/agent.pid"))]


def until_released(release: Path) -> str:
    """A task's shell command: print its index, then run until `release` exists (the test looks meanwhile)."""
    return f'echo "$IRIS_TASK_INDEX"; until [ -e {release} ]; do sleep 0.05; done'


def running_slice(job: Job) -> str:
    """The slice a gang runs on, once the job's status shows every task running somewhere."""
    status = wait_until(lambda: (s := job.status()).state == JobState.RUNNING and all(t.worker_id for t in s.tasks)
                        and s, timeout=240, what="the gang running on its slice")  # fmt: skip
    return status.tasks[0].worker_id.removesuffix("-0")


def test_manual_group_grows_for_a_gang_and_shrinks_when_idle(fleet: SshFleet, shared_dir: Path) -> None:
    """A coscheduled 2-task job on the empty manual group: a slice is claimed over SSH, its agents run the job,
    and after scale_down_delay the idle slice's agents are stopped and its hosts freed."""
    submitted = time.monotonic()
    release = shared_dir / "release"  # the gang runs until its slice has been looked at, however long that takes
    job = fleet.client.submit_command(
        ["sh", "-c", until_released(release)], resources=ResourceSpec(cpu=1, memory="512m", replicas=2),
        coscheduling=CoschedulingConfig("tpu-name"), constraints=[Constraint("pool", "EQ", "ssh")],
    )
    try:
        slice_id = running_slice(job)
        running = time.monotonic()
        assert slice_id.startswith("ssh-pool-")
        claims = sorted((fleet.sshd.remote_home / "manual").glob("*/claim.json"))
        assert sorted(host_key(h) for h in fleet.sshd.hosts[:2]) == sorted(p.parent.name for p in claims)
        pids = agent_pids(fleet.sshd, "manual")
        assert 2 == len(pids)
    finally:
        release.touch()
    status = job.wait(timeout=240)
    ran = time.monotonic()
    assert JobState.SUCCEEDED == status.state
    assert [f"{slice_id}-0", f"{slice_id}-1"] == [t.worker_id for t in status.tasks]

    wait_until(lambda: all(pid_gone(p) for p in pids), timeout=120, what="the idle slice's agents stopped")
    wait_until(lambda: not list((fleet.sshd.remote_home / "manual").glob("*/claim.json")), timeout=60,
               what="the hosts freed")
    gone = time.monotonic()
    print(f"manual slice: empty group -> gang running {running - submitted:.1f} s; done -> agents stopped "
          f"{gone - ran:.1f} s")
    assert fleet.sshd.remote_tmp is not None
    left = [str(p) for p in fleet.sshd.remote_tmp.rglob("*") if slice_id in str(p)]
    assert [] == left  # the hosts keep no task area or job directory of the slice


def test_gcp_group_grows_for_a_tpu_gang_and_deletes_the_node_when_idle(fleet: SshFleet, shared_dir: Path) -> None:
    """A coscheduled v4-16 job on the empty gcp group: a TPU node is created through the API, its VMs' agents
    (started over SSH, TPU facts from the metadata server) run the job, and the idle node is deleted."""
    submitted = time.monotonic()
    release = shared_dir / "release"  # the gang runs until its slice has been looked at, however long that takes
    job = fleet.client.submit_command(
        ["sh", "-c", until_released(release)], resources=ResourceSpec(cpu=1, memory="512m", replicas=2),
        coscheduling=CoschedulingConfig("tpu-name"), constraints=[Constraint("tpu-topology", "EQ", "v4-16")],
    )
    try:
        slice_id = running_slice(job)
        assert slice_id.startswith("tpu-v4-16-")
        workers = {w.worker_id: w.attributes for w in fleet.client.list_workers()}
        assert ("v4-16", "2x2x2", 2) == tuple(
            workers[f"{slice_id}-1"][k] for k in ("tpu-accelerator-type", "tpu-chip-topology", "tpu-vm-count")
        )
        pids = agent_pids(fleet.sshd, "gcp")
        assert 2 == len(pids)
    finally:
        release.touch()
    status = job.wait(timeout=240)
    ran = time.monotonic()
    assert JobState.SUCCEEDED == status.state
    assert [f"{slice_id}-0", f"{slice_id}-1"] == [t.worker_id for t in status.tasks]

    wait_until(lambda: not fleet.tpu.nodes, timeout=120, what="the idle slice's node deleted")
    gone = time.monotonic()
    wait_until(lambda: all(pid_gone(p) for p in pids), timeout=60, what="its agents stopped")
    print(f"gcp slice: empty group -> gang done {ran - submitted:.1f} s; done -> node deleted {gone - ran:.1f} s")
    creates = [r for m, r in fleet.tpu.requests if m == "CreateNode"]
    assert 1 == len(creates)
    assert {"iris-managed": "true", "iris-scale-group": "tpu-v4-16", "iris-slice-id": slice_id,
            "iris-capacity": "on_demand"} == dict(
        creates[0].node.labels
    )
    assert 1 == fleet.tpu.methods().count("DeleteNode")


def group_status(fleet: SshFleet, name: str) -> dict[str, object]:
    """The autoscaler's view of one group (its `status` query)."""

    async def query() -> dict[str, object]:
        client = await Client.connect(fleet.cluster.info.address)
        status = await client.get_workflow_handle(AUTOSCALER_WORKFLOW_ID).query("status")
        return next(g for g in status["groups"] if g["name"] == name)

    return asyncio.run(query())


def autoscaler_settled(fleet: SshFleet) -> bool:
    """Nothing in flight: no workflow task to run, no activity running."""
    return armed_timers(asyncio.run(autoscaler_history(fleet.cluster.info.address))) is not None


def wake_autoscaler(fleet: SshFleet) -> None:
    async def wake() -> None:
        client = await Client.connect(fleet.cluster.info.address)
        await client.get_workflow_handle(AUTOSCALER_WORKFLOW_ID).signal(WAKE_AUTOSCALER, 1)

    asyncio.run(wake())


TPU_GANG = dict(resources=ResourceSpec(cpu=1, memory="512m", replicas=2), coscheduling=CoschedulingConfig("tpu-name"),
                constraints=[Constraint("tpu-topology", "EQ", "v4-16")])


def test_gcp_stockout_backs_the_group_off_then_it_recovers(fleet: SshFleet) -> None:
    """The TPU API answers the create with RESOURCE_EXHAUSTED: the group backs off (3 s, the fleet's
    `autoscaler.backoff`) and says why, creates nothing, and once the backoff ends the next create succeeds and
    the job runs."""
    fleet.tpu.fail_next_create = (8, "There is no more capacity in the zone us-central2-b; try another zone")
    creates_before = fleet.tpu.methods().count("CreateNode")
    job = fleet.client.submit_command(["true"], **TPU_GANG)  # type: ignore[arg-type]
    status = wait_until(lambda: (g := group_status(fleet, "tpu-v4-16"))["backoff_reason"] and g, timeout=60,
                        interval=0.2, what="the group backs off")
    assert "quota exhausted: " in str(status["backoff_reason"]) and "no more capacity" in str(status["backoff_reason"])
    assert 0 < float(status["backoff_seconds"]) <= 3  # type: ignore[arg-type]
    assert {} == fleet.tpu.nodes  # the refused create left nothing behind
    assert JobState.SUCCEEDED == job.wait(timeout=240).state
    assert 2 == fleet.tpu.methods().count("CreateNode") - creates_before


def test_a_permanent_refusal_fails_the_slice_at_once_and_backs_the_group_off_long(fleet: SshFleet) -> None:
    """The TPU API refuses the create as invalid (an accelerator type the zone does not offer): one create,
    no retry and no second slice; the group backs off for ten minutes saying why, in the autoscaler's status
    and in `iris cluster status`."""
    submitted = time.monotonic()
    job = fleet.client.submit_command(["true"], resources=ResourceSpec(cpu=1, memory="512m"),
                                      constraints=[Constraint("tpu-topology", "EQ", "v9x-8")])  # fmt: skip
    try:
        status = wait_until(lambda: (g := group_status(fleet, "tpu-v9x-8"))["backoff_reason"] and g, timeout=60,
                            interval=0.2, what="the group backs off")  # fmt: skip
        print(f"refused create: submitted -> group backing off with the reason {time.monotonic() - submitted:.1f} s")
        reason = str(status["backoff_reason"])
        assert reason.startswith("refused by the platform (a config or permission problem): create: gcp: ")
        assert "INVALID_ARGUMENT: Accelerator type 'v9x-8' is not available in zone us-east5-a" in reason
        assert "PlatformRefused" == status["last_error_type"]
        assert 590 <= float(status["backoff_seconds"]) <= 600  # type: ignore[arg-type]
        # Three more plans of the autoscaler (its scans): nothing more is tried while the group backs off.
        # Woken as the scheduler wakes it for new demand, the autoscaler plans again and tries nothing while
        # the group backs off: its plan is in history (and it settles) before the requests are counted.
        mark = autoscaler_mark(fleet.cluster.info.address)
        wake_autoscaler(fleet)
        wait_until(lambda: plans_since(fleet.cluster.info.address, mark) > 0 and autoscaler_settled(fleet), timeout=30,
                   what="a plan after the wake")  # fmt: skip
        creates = [r for m, r in fleet.tpu.requests if m == "CreateNode" and "us-east5-a" in r.parent]
        assert 1 == len(creates)
        assert [] == [n for n in fleet.tpu.nodes if "us-east5-a" in n]
        text = subprocess.run([sys.executable, "-m", "iris", "cluster", "status"], env=fleet.cluster.env,
                              capture_output=True, text=True, timeout=60, check=False).stdout  # fmt: skip
        assert "refused by the platform" in text and "v9x-8" in text
    finally:
        fleet.client.terminate(job.job_id)


def test_a_two_zone_group_creates_where_there_is_capacity(fleet: SshFleet, shared_dir: Path) -> None:
    """Two zones, RESOURCE_EXHAUSTED in the first: the autoscaler's slice is created in the second (its
    workers say so in their `zone` attribute), the gang runs there, the group does not back off, and nothing
    is left in the first zone."""
    fleet.tpu.create_errors["europe-west4-a"] = (8, "There is no more capacity in the zone europe-west4-a")
    submitted = time.monotonic()
    release = shared_dir / "release"  # the gang runs until its workers have been looked at, however long
    job = fleet.client.submit_command(
        ["sh", "-c", until_released(release)], resources=ResourceSpec(cpu=1, memory="512m", replicas=2),
        coscheduling=CoschedulingConfig("tpu-name"),
        constraints=[Constraint("tpu-topology", "EQ", "v4-16"), Constraint("taint:zonal", "EXISTS")],
    )
    try:
        slice_id = running_slice(job)
        print(f"two zones, the first stocked out: empty group -> gang running {time.monotonic() - submitted:.1f} s")
        assert slice_id.startswith("tpu-zonal-")
        workers = {w.worker_id: w.attributes for w in fleet.client.list_workers()}
        assert ["us-central1-a", "us-central1-a"] == [workers[f"{slice_id}-{i}"]["zone"] for i in (0, 1)]
    finally:
        release.touch()
    status = job.wait(timeout=240)
    assert JobState.SUCCEEDED == status.state
    assert [f"{slice_id}-0", f"{slice_id}-1"] == [t.worker_id for t in status.tasks]
    def creates(zone: str) -> int:
        return sum(1 for m, r in fleet.tpu.requests if m == "CreateNode" and r.parent.endswith(f"/{zone}"))

    assert (1, 1) == (creates("europe-west4-a"), creates("us-central1-a"))
    assert [] == [n for n in fleet.tpu.nodes if "/europe-west4-a/" in n]  # the stocked-out zone keeps nothing
    assert "" == group_status(fleet, "tpu-zonal")["backoff_reason"]
    wait_until(lambda: not [n for n in fleet.tpu.nodes if "/us-central1-a/" in n], timeout=120,
               what="the idle slice's node deleted")  # fmt: skip


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the tasks can write to: agents started as root run process tasks as `nobody`."""
    path = Path(tempfile.mkdtemp(prefix="iris-ssh-e2e-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_preempted_tpu_slice_is_replaced_and_its_gang_retried(fleet: SshFleet, shared_dir: Path) -> None:
    """The cloud preempts a READY node under a running gang (its VMs vanish): the tasks are retried as
    preemptions on a new slice, and the preempted node is deleted."""
    tmp_path = shared_dir
    script = f'echo "$IRIS_ATTEMPT $$" >> {tmp_path}/task-$IRIS_TASK_INDEX; [ "$IRIS_ATTEMPT" != 0 ] || sleep 300'
    job = fleet.client.submit_command(["sh", "-c", script], **TPU_GANG)  # type: ignore[arg-type]
    wait_until(lambda: len(lines(tmp_path / "task-0")) == 1 and len(lines(tmp_path / "task-1")) == 1, timeout=240,
               what="the gang runs")
    # The processes write before their agent's "started" reaches the job: wait for the job to know the worker.
    wait_until(lambda: all(t.worker_id for t in job.status().tasks), timeout=60, what="the job sees its workers")
    first_slice = job.status().tasks[0].worker_id.removesuffix("-0")
    node = f"projects/proj/locations/us-central2-b/nodes/{first_slice}"
    # the preemption: the node says so and everything on its VMs dies at once
    fleet.tpu.set_state(node, tpu_v2.Node.State.PREEMPTED)
    for pid in agent_pids(fleet.sshd, "gcp"):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    for i in (0, 1):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(lines(tmp_path / f"task-{i}")[0].split()[1]), signal.SIGKILL)

    status = job.wait(timeout=240)
    assert JobState.SUCCEEDED == status.state
    assert ([1, 1], [1, 1]) == ([t.attempt for t in status.tasks], [t.preemption_count for t in status.tasks])
    second_slice = status.tasks[0].worker_id.removesuffix("-0")
    assert second_slice != first_slice and second_slice.startswith("tpu-v4-16-")
    wait_until(lambda: node not in fleet.tpu.nodes, timeout=60, what="the preempted node deleted")
