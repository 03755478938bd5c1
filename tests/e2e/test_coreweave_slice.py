"""A CoreWeave slice end to end: NodePool + worker Pod through the fake API server, a real agent, a real job.

The platform talks to the fake Kubernetes API through the real client; the fake's
"kubelet" runs the worker Pod's own command line as a local process, so the agent the
platform configured (worker id, attributes, Temporal address, store, health port)
registers with the session's real cluster and runs a job placed by the slice's labels.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.platforms.base import ControlPlaneAddress, PlatformState, ScaleGroupSpec
from activities.platforms.coreweave import CoreweavePlatform
from iris import Constraint, IrisClient, JobState, ResourceSpec, get_job_info
from iris.local_cluster import daemon_environment, free_port
from tests.platforms.fake_kubelet import FakeKubelet
from tests.platforms.k8s_fake import NODEPOOLS, FakeKubernetes
from tests.support import Cluster, pid_running, wait_until

pytestmark = pytest.mark.e2e
PODS = "/api/v1/namespaces/iris/pods"


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
                  "health_port": free_port()},
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
