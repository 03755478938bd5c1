"""A CoreWeave slice end to end: NodePool + worker Pod through the fake API server, a real agent, a real job.

The platform talks to the fake Kubernetes API through the real client; the fake's
"kubelet" runs the worker Pod's own command line as a local process, so the agent the
platform configured (worker id, attributes, Temporal address, store, health port)
registers with the session's real cluster and runs a job placed by the slice's labels.
The second test goes through the whole fleet path: a controller configured with a
CoreWeave scale group, the autoscaler, SliceWorkflow, and scale-down when idle.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.contracts import AUTOSCALER_WORKFLOW_ID
from activities.contracts.fleet import ControlPlaneAddress, PlatformState, ScaleGroupSpec
from activities.platforms.coreweave import CoreweavePlatform
from activities.platforms.coreweave_model import nodepool_name
from iris import Constraint, IrisClient, JobState, ResourceSpec, get_job_info
from iris.config.cluster_file import parse_config
from iris.local.cluster import LocalCluster, daemon_environment, free_port
from tests.platforms.fake_kubelet import FakeKubelet
from tests.platforms.k8s_fake import NODEPOOLS, FakeKubernetes
from tests.support import Cluster, pid_running, wait_until
from workflows.fleet.autoscaler_state import AutoscalerStatus, GroupStatus

pytestmark = pytest.mark.e2e
PODS = "/api/v1/namespaces/iris/pods"
CoreweaveCluster = tuple[Cluster, FakeKubernetes, FakeKubelet]


@pytest.fixture
def kubelet(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[FakeKubernetes, FakeKubelet]]:
    fake = FakeKubernetes()
    fake.start()
    env = {**daemon_environment(os.environ), "IRIS_HOME": str(cluster.local.home), "PYTHONUNBUFFERED": "1"}
    node = FakeKubelet(fake, env, tmp_path)
    yield fake, node
    node.stop()
    fake.stop()


def where_am_i() -> tuple[str, object, object]:
    info = get_job_info()
    return info.worker_id, os.environ.get("IRIS_WORKER_ID"), info.task_index


def test_job_runs_on_a_coreweave_slice_and_terminate_stops_its_worker(
    cluster: Cluster, client: IrisClient, kubelet: tuple[FakeKubernetes, FakeKubelet], tmp_path: Path
) -> None:
    """create -> node ready -> bootstrap starts the agent Pod -> a job placed by slice label runs -> terminate."""
    fake, node = kubelet
    group = ScaleGroupSpec(
        name="h100", platform="coreweave", hosts_per_slice=1, cpu_millis=2000, memory_bytes=2 * 1024**3, gpus=8,
        attributes={"gpu-type": "h100"}, runtime="process",
        settings={"namespace": "iris", "instance_type": "gd-8xh100ib-i128", "image": "iris-worker:test",
                  "kubeconfig": str(fake.write_kubeconfig(tmp_path / "kubeconfig")), "poll_interval": 0.2,
                  "health_port": free_port(), "host_dir": str(tmp_path / "node")},
    )  # fmt: skip
    control = ControlPlaneAddress(cluster.info.address, "default", cluster.info.store_url)
    platform = CoreweavePlatform(group)

    async def bring_up() -> PlatformState:
        await platform.create_slice("cw-e2e", group)
        described = await platform.describe("cw-e2e")
        assert described is not None
        await asyncio.wait_for(platform.bootstrap("cw-e2e", group, control), 120)
        return described.state

    assert PlatformState.READY == asyncio.run(bring_up())
    try:
        worker = wait_until(
            lambda: next((w for w in client.list_workers() if w.worker_id == "cw-e2e-0" and w.healthy), None),
            timeout=60, what="the slice's agent registers",
        )  # fmt: skip
        assert {"iris-slice-id": "cw-e2e", "iris-scale-group": "h100", "tpu-name": "cw-e2e", "tpu-worker-id": 0,
                "gpu-type": "h100"}.items() <= worker.attributes.items()  # fmt: skip

        job = client.submit(
            where_am_i, resources=ResourceSpec(cpu=1, memory="512m", gpus=1),
            constraints=[Constraint("iris-slice-id", "EQ", "cw-e2e")],
        )  # fmt: skip
        assert JobState.SUCCEEDED == job.wait(timeout=120).state
        assert [("cw-e2e-0", "cw-e2e-0", 0)] == [tuple(r) for r in job.results()]
    finally:
        process = node.processes[("iris", "iris-worker-cw-e2e")]
        asyncio.run(platform.terminate("cw-e2e"))

    assert not pid_running(process.pid), "deleting the Pod stopped the agent"
    assert {} == fake.pods and {} == fake.nodepools
    with fake.lock:
        calls = [(c.method, c.path) for c in fake.calls]
    assert ("POST", NODEPOOLS) == calls[0]
    assert calls.index(("POST", PODS)) < calls.index(("DELETE", f"{PODS}/iris-worker-cw-e2e"))
    assert calls.index(("DELETE", f"{PODS}/iris-worker-cw-e2e")) < calls.index(("DELETE", f"{NODEPOOLS}/iris-cw-e2e"))


# -- through the autoscaler ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def coreweave_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Cluster, FakeKubernetes, FakeKubelet]]:
    """A local cluster with no fixed workers and one CoreWeave scale group whose API server is the fake."""
    home = tmp_path_factory.mktemp("iris-coreweave")
    fake = FakeKubernetes()
    fake.start()
    node = FakeKubelet(fake, {**daemon_environment(os.environ), "IRIS_HOME": str(home), "PYTHONUNBUFFERED": "1"}, home)
    config = {
        "local": {"worker_groups": []},
        "autoscaler": {"scan_interval": "1s"},  # the default 5 s only makes the test wait
        "scale_groups": [{
            "name": "h100", "platform": "coreweave", "hosts_per_slice": 1, "min_slices": 0, "max_slices": 1,
            "runtime": "process", "resources": {"cpu": 2, "memory": "2g", "gpus": 8},
            "attributes": {"gpu-type": "h100"}, "scale_up_delay": "0s", "scale_down_delay": "3s",
            "coreweave": {"namespace": "iris", "instance_type": "gd-8xh100ib-i128", "image": "iris-worker:test",
                          "kubeconfig": str(fake.write_kubeconfig(home / "kubeconfig")), "poll_interval": 0.5,
                          "health_port": free_port(), "host_dir": str(home / "node")},
        }, {
            "name": "b200", "platform": "coreweave", "max_slices": 1, "runtime": "process",
            "resources": {"cpu": 2, "memory": "2g", "gpus": 8}, "attributes": {"gpu-type": "b200"},
            "coreweave": {"namespace": "iris", "instance_type": "gd-8xb200", "image": "iris-worker:test",
                          "kubeconfig": str(home / "kubeconfig"), "poll_interval": 0.5, "health_port": free_port(),
                          "host_dir": str(home / "node")},
        }],
    }  # fmt: skip
    node.stocked_out.add("gd-8xb200")
    # Left behind by an earlier controller of this cluster: no SliceWorkflow owns it.
    fake.seed_nodepool("iris-h100-orphan", {"iris-managed": "true", "iris-scale-group": "h100",
                                            "iris-slice-id": "h100-orphan"})  # fmt: skip
    local = LocalCluster(home)
    try:
        info = local.up(parse_config(config, "coreweave test cluster"))
        yield Cluster(local, info), fake, node
    finally:
        local.down()
        node.stop()
        fake.stop()


def test_autoscaler_deletes_an_orphaned_nodepool_of_its_group(coreweave_cluster: CoreweaveCluster) -> None:
    """A NodePool with the group's labels that no SliceWorkflow owns is deleted when the autoscaler starts."""
    _, fake, _ = coreweave_cluster
    wait_until(lambda: "iris-h100-orphan" not in fake.nodepools, timeout=60, what="the orphan NodePool is deleted")
    with fake.lock:
        lists = [c.selector for c in fake.calls if c.method == "GET" and c.path == NODEPOOLS]
        deletes = [c.path for c in fake.calls if c.method == "DELETE"]
    assert {"iris-managed": "true", "iris-scale-group": "h100"} in lists
    assert f"{NODEPOOLS}/iris-h100-orphan" in deletes


def test_autoscaler_brings_up_a_coreweave_slice_for_a_gpu_job_and_removes_it_when_idle(
    coreweave_cluster: CoreweaveCluster,
) -> None:
    """A GPU job on an empty group: the autoscaler makes a NodePool + worker Pod, the job runs there, and the
    idle slice's Pod and NodePool are deleted after scale_down_delay (the agent process is gone)."""
    cluster, fake, node = coreweave_cluster
    client = IrisClient.connect(cluster.info.address, store=cluster.info.store_url)
    submitted = time.monotonic()
    job = client.submit(
        where_am_i, resources=ResourceSpec(cpu=1, memory="512m", gpus=1),
        constraints=[Constraint("gpu-type", "EQ", "h100")],
    )  # fmt: skip
    assert JobState.SUCCEEDED == job.wait(timeout=240).state
    ran = time.monotonic()
    ((worker_id, env_worker_id, index),) = [tuple(r) for r in job.results()]
    assert worker_id == env_worker_id and 0 == index
    (pod_key,) = node.processes
    slice_id = worker_id.removesuffix("-0")
    assert f"iris-worker-{k8s_name_of(slice_id)}" == pod_key[1]
    process = node.processes[pod_key]

    pool_name = f"iris-{k8s_name_of(slice_id)}"
    wait_until(lambda: pod_key not in fake.pods and pool_name not in fake.nodepools, timeout=120,
               what="the idle slice is deleted")  # fmt: skip
    gone = time.monotonic()
    print(f"coreweave slice: empty group -> job done {ran - submitted:.1f} s; done -> slice deleted {gone - ran:.1f} s")
    with fake.lock:
        own = [c for c in fake.calls if c.path.endswith((f"/{pool_name}", f"/{pod_key[1]}"))]
    print(f"coreweave slice: {len(own)} API calls on its NodePool and Pod over {gone - submitted:.0f} s")
    assert not pid_running(process.pid), "deleting the Pod stopped the agent"

    with fake.lock:
        calls = list(fake.calls)
    writes = [(c.method, c.path.rsplit("/", 1)[-1] if c.method == "DELETE" else c.path) for c in calls
              if c.method in ("POST", "DELETE") and c.status in (200, 201)
              and c.labels.get("iris-slice-id") == slice_id]  # fmt: skip
    assert [("POST", NODEPOOLS), ("POST", PODS), ("DELETE", pod_key[1]), ("DELETE", f"iris-{k8s_name_of(slice_id)}")
            ] == writes  # fmt: skip
    assert all(c.labels.get("iris-scale-group") == "h100" for c in calls if c.method == "POST")


def k8s_name_of(slice_id: str) -> str:
    return nodepool_name(slice_id).removeprefix("iris-")


def test_a_stocked_out_instance_type_backs_its_group_off_as_quota(coreweave_cluster: CoreweaveCluster) -> None:
    """A NodePool whose instance type has no capacity is deleted, and the autoscaler backs the group off
    with the quota reason the NodePool gave, instead of retrying at once."""
    cluster, fake, _ = coreweave_cluster
    client = IrisClient.connect(cluster.info.address, store=cluster.info.store_url)
    job = client.submit(
        where_am_i, resources=ResourceSpec(cpu=1, memory="512m", gpus=1),
        constraints=[Constraint("gpu-type", "EQ", "b200")],
    )  # fmt: skip
    try:
        group = wait_until(lambda: (g := autoscaler_group(cluster, "b200")).backoff_reason and g, timeout=90,
                           what="the b200 group backs off")  # fmt: skip
        assert group.backoff_reason.startswith("quota exhausted: ")
        assert "InsufficientCapacity" in group.backoff_reason and group.backoff_seconds > 0
        assert JobState.PENDING == job.status().state
        wait_until(lambda: not any(n.startswith("iris-b200-") for n in fake.nodepools), timeout=30,
                   what="the refused NodePool is deleted")  # fmt: skip
        with fake.lock:
            created = [c for c in fake.calls if c.method == "POST" and c.labels.get("iris-scale-group") == "b200"]
        assert 1 == len(created), "no second NodePool while the group backs off"
    finally:
        client.terminate(job.job_id)


def autoscaler_group(cluster: Cluster, name: str) -> GroupStatus:
    """The autoscaler's published status of one group (its `status` query)."""

    async def query() -> AutoscalerStatus:
        temporal = await Client.connect(cluster.info.address)
        status: AutoscalerStatus = await temporal.get_workflow_handle(AUTOSCALER_WORKFLOW_ID).query(
            "status", result_type=AutoscalerStatus
        )
        return status

    return next(g for g in asyncio.run(query()).groups if g.name == name)
