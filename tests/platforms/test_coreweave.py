"""The CoreWeave platform through the real `kubernetes` client against a fake API server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from activities.contracts.fleet import ControlPlaneAddress, PlatformState, ScaleGroupSpec
from activities.platforms.base import PlatformRefused, QuotaExhausted, SliceFailed
from activities.platforms.coreweave import CoreweavePlatform, KubernetesApiError
from tests.platforms.k8s_fake import NODEPOOLS, FakeKubernetes

PODS = "/api/v1/namespaces/iris/pods"
CONTROL = ControlPlaneAddress("temporal.iris.svc:7233", "default", "s3://bucket/iris", {"AWS_REGION": "us-east"})


def labels(group: str, slice_id: str) -> dict[str, str]:
    return {"iris-managed": "true", "iris-scale-group": group, "iris-slice-id": slice_id}


def log(fake: FakeKubernetes) -> list[tuple[str, str, int]]:
    """The request log as (method, path, status)."""
    with fake.lock:
        return [(c.method, c.path, c.status) for c in fake.calls]


async def wait_until_async(predicate: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def ready_slice(fake: FakeKubernetes, platform: CoreweavePlatform, group: ScaleGroupSpec, slice_id: str) -> None:
    """Create a slice, let its node join, bootstrap it and mark the agent Pod Ready."""
    await platform.create_slice(slice_id, group)
    fake.set_current_nodes(f"iris-{slice_id}", 1)
    boot = asyncio.create_task(platform.bootstrap(slice_id, group, CONTROL))
    await fake.wait_for_pod("iris", f"iris-worker-{slice_id}")
    fake.set_pod_ready("iris", f"iris-worker-{slice_id}", host_ip="10.0.0.7")
    await asyncio.wait_for(boot, 30)


async def test_nodepool_and_pod_lifecycle_to_ready(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """A slice is a NodePool that waits for its node, then a worker Pod on that node that waits for Ready."""
    group = coreweave_group()
    platform = CoreweavePlatform(group)

    info = await platform.create_slice("h100-s1", group)
    assert PlatformState.CREATING == info.state
    again = await platform.create_slice("h100-s1", group)  # a retried activity finds the same NodePool
    assert PlatformState.CREATING == again.state
    assert ["iris-h100-s1"] == list(fake_k8s.nodepools)

    pool = fake_k8s.nodepools["iris-h100-s1"]
    assert {"instanceType": "gd-8xh100ib-i128", "autoscaling": False, "targetNodes": 1,
            "nodeLabels": labels("h100", "h100-s1")} == pool["spec"]  # fmt: skip
    assert labels("h100", "h100-s1") == pool["metadata"]["labels"]

    described = await platform.describe("h100-s1")
    assert described is not None and PlatformState.CREATING == described.state
    fake_k8s.set_current_nodes("iris-h100-s1", 1)
    described = await platform.describe("h100-s1")
    assert described is not None and PlatformState.READY == described.state
    assert ["h100-s1-0"] == [h.worker_id for h in described.hosts]

    boot = asyncio.create_task(platform.bootstrap("h100-s1", group, CONTROL))
    await fake_k8s.wait_for_pod("iris", "iris-worker-h100-s1")
    await asyncio.sleep(0.2)
    assert not boot.done(), "bootstrap returned before the Pod was Ready"
    fake_k8s.set_pod_ready("iris", "iris-worker-h100-s1", host_ip="10.0.0.7")
    await asyncio.wait_for(boot, 30)

    pod = fake_k8s.pods[("iris", "iris-worker-h100-s1")]
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    assert labels("h100", "h100-s1") == pod["metadata"]["labels"]
    assert {"iris-slice-id": "h100-s1"} == spec["nodeSelector"]
    assert spec["hostNetwork"] is True
    assert "iris-worker:test" == container["image"]
    args = container["args"]
    assert ["worker", "serve", "--runtime", "containerd", "--worker-id", "h100-s1-0"] == args[:6]
    attributes = {args[i + 1] for i, a in enumerate(args) if a == "--attribute"}
    assert {"gpu-type=h100", "tpu-name=h100-s1", "tpu-worker-id=0", "iris-slice-id=h100-s1",
            "iris-scale-group=h100"} == attributes  # fmt: skip
    assert "8" == args[args.index("--gpus") + 1]
    assert {"nvidia.com/gpu": "8", "rdma/ib": "1"} == container["resources"]["limits"]
    assert {"path": "/health", "port": 8081} == container["readinessProbe"]["httpGet"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert {"IRIS_TEMPORAL_ADDRESS": "temporal.iris.svc:7233", "IRIS_TEMPORAL_NAMESPACE": "default",
            "IRIS_STORE": "s3://bucket/iris", "AWS_REGION": "us-east", "IRIS_HOME": "/var/lib/iris"} == env  # fmt: skip
    # The agent's home (its task areas, the runner code it stages) is the node's directory at the same path,
    # since containerd mounts them from the node; the CRI socket is the node's.
    assert [{"name": "iris-home", "hostPath": {"path": "/var/lib/iris", "type": "DirectoryOrCreate"}},
            {"name": "containerd", "hostPath": {"path": "/run/containerd/containerd.sock", "type": "Socket"}}
            ] == spec["volumes"]  # fmt: skip
    assert [{"name": "iris-home", "mountPath": "/var/lib/iris"},
            {"name": "containerd", "mountPath": "/run/containerd/containerd.sock"}
            ] == container["volumeMounts"]  # fmt: skip

    described = await platform.describe("h100-s1")
    assert described is not None and PlatformState.READY == described.state
    assert "10.0.0.7" == described.hosts[0].address

    calls = log(fake_k8s)
    assert ("POST", NODEPOOLS, 201) == calls[0]
    assert ("POST", NODEPOOLS, 409) == calls[1]
    assert [("POST", PODS, 201)] == [c for c in calls if c[0] == "POST" and c[1] == PODS]
    assert {("GET", f"{NODEPOOLS}/iris-h100-s1", 200), ("GET", f"{PODS}/iris-worker-h100-s1", 404),
            ("GET", f"{PODS}/iris-worker-h100-s1", 200)} <= set(calls)  # fmt: skip
    with fake_k8s.lock:
        assert all(c.authorized for c in fake_k8s.calls), "every call carries the kubeconfig's token"
        assert all(labels("h100", "h100-s1") == c.labels for c in fake_k8s.calls if c.status in (200, 201))


async def test_quota_condition_becomes_quota_exhausted_and_the_nodepool_goes(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """A NodePool reporting no capacity for its instance type is deleted and surfaces as QuotaExhausted."""
    group = coreweave_group()
    platform = CoreweavePlatform(group)
    await platform.create_slice("h100-q", group)
    fake_k8s.add_condition("iris-h100-q", "AtTarget", "False", "InsufficientCapacity", "no gd-8xh100ib-i128 left")

    with pytest.raises(QuotaExhausted, match="InsufficientCapacity"):
        await platform.describe("h100-q")
    assert {} == fake_k8s.nodepools
    assert ("DELETE", f"{NODEPOOLS}/iris-h100-q", 200) in log(fake_k8s)
    assert await platform.describe("h100-q") is None


async def test_admission_refusing_for_quota_is_quota_exhausted(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """A create refused with 403 for quota is the quota error too, not a retryable crash."""
    group = coreweave_group()
    fake_k8s.reject_nodepool_create = (403, "Forbidden", "exceeded quota: gd-8xh100ib-i128 limit 2")
    with pytest.raises(QuotaExhausted, match="exceeded quota"):
        await CoreweavePlatform(group).create_slice("h100-r", group)
    assert [("POST", NODEPOOLS, 403)] == log(fake_k8s)


async def test_failed_pod_deletes_pod_and_nodepool(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """A worker Pod that can never start fails bootstrap with SliceFailed after everything is deleted."""
    group = coreweave_group()
    platform = CoreweavePlatform(group)
    await platform.create_slice("h100-f", group)
    fake_k8s.set_current_nodes("iris-h100-f", 1)
    boot = asyncio.create_task(platform.bootstrap("h100-f", group, CONTROL))
    await fake_k8s.wait_for_pod("iris", "iris-worker-h100-f")
    fake_k8s.set_pod_waiting("iris", "iris-worker-h100-f", "InvalidImageName", message="bad tag")

    with pytest.raises(SliceFailed, match="InvalidImageName"):
        await asyncio.wait_for(boot, 30)
    assert {} == fake_k8s.pods and {} == fake_k8s.nodepools
    calls = log(fake_k8s)
    pod_delete = calls.index(("DELETE", f"{PODS}/iris-worker-h100-f", 200))
    assert pod_delete < calls.index(("DELETE", f"{NODEPOOLS}/iris-h100-f", 200))


async def test_bootstrap_recreates_a_pod_that_vanished(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """A worker Pod deleted behind Iris's back while bootstrap waits is created again, not waited on forever."""
    group = coreweave_group()
    platform = CoreweavePlatform(group)
    await platform.create_slice("h100-v", group)
    fake_k8s.set_current_nodes("iris-h100-v", 1)
    boot = asyncio.create_task(platform.bootstrap("h100-v", group, CONTROL))
    first = await fake_k8s.wait_for_pod("iris", "iris-worker-h100-v")
    fake_k8s.remove_pod("iris", "iris-worker-h100-v")
    await wait_until_async(lambda: fake_k8s.pods.get(("iris", "iris-worker-h100-v"), first) is not first)
    fake_k8s.set_pod_ready("iris", "iris-worker-h100-v")
    await asyncio.wait_for(boot, 30)
    assert [201, 201] == [c.status for c in fake_k8s.calls_to("POST", PODS)]


async def test_a_refused_call_is_one_readable_line(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """A permanent refusal (here RBAC) is PlatformRefused, one line naming the call, the status and the
    server's message; a transient one (503) stays a retryable KubernetesApiError."""
    group = coreweave_group()
    platform = CoreweavePlatform(group)
    message = 'nodepools.compute.coreweave.com "iris-h100-x" is forbidden: User cannot get resource "nodepools"'
    fake_k8s.refusals[("GET", f"{NODEPOOLS}/iris-h100-x")] = (403, "Forbidden", message)
    with pytest.raises(PlatformRefused) as refused:
        await platform.describe("h100-x")
    assert f"kubernetes get_nodepool: 403 Forbidden: {message}" == str(refused.value)
    fake_k8s.refusals[("GET", f"{NODEPOOLS}/iris-h100-x")] = (503, "ServiceUnavailable", "etcd leader changed")
    with pytest.raises(KubernetesApiError, match="get_nodepool: 503 Service Unavailable: etcd leader changed"):
        await platform.describe("h100-x")


async def test_an_invalid_nodepool_is_refused_at_once(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """The API refusing the NodePool itself (422: an instance type it does not offer) is PlatformRefused."""
    group = coreweave_group(instance_type="gd-9xz999")
    fake_k8s.reject_nodepool_create = (422, "Invalid", 'NodePool "iris-h100-i" is invalid: spec.instanceType: '
                                                       'Unsupported value: "gd-9xz999"')  # fmt: skip
    with pytest.raises(PlatformRefused, match=r"create_nodepool: 422 .*Unsupported value: \"gd-9xz999\""):
        await CoreweavePlatform(group).create_slice("h100-i", group)


async def test_crash_looping_pod_fails_describe_after_max_restarts(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """An agent that keeps crashing fails its slice (and cleans up); a few restarts are tolerated."""
    group = coreweave_group(max_restarts=2)
    platform = CoreweavePlatform(group)
    await ready_slice(fake_k8s, platform, group, "h100-c")
    fake_k8s.set_pod_waiting("iris", "iris-worker-h100-c", "CrashLoopBackOff", restarts=2)
    described = await platform.describe("h100-c")
    assert described is not None and PlatformState.READY == described.state
    assert "CrashLoopBackOff" in described.hosts[0].state
    fake_k8s.set_pod_waiting("iris", "iris-worker-h100-c", "CrashLoopBackOff", restarts=3)
    with pytest.raises(SliceFailed, match="CrashLoopBackOff after 3 restarts"):
        await platform.describe("h100-c")
    assert {} == fake_k8s.pods and {} == fake_k8s.nodepools


async def test_node_that_never_joins_times_out_and_is_deleted(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """A NodePool still under target (CURRENT < TARGET) after node_ready_timeout fails the slice and is deleted."""
    group = coreweave_group(node_ready_timeout="20m")
    skew = timedelta()
    platform = CoreweavePlatform(group, now=lambda: datetime.now(UTC) + skew)
    await platform.create_slice("h100-t", group)
    described = await platform.describe("h100-t")
    assert described is not None and PlatformState.CREATING == described.state
    skew = timedelta(minutes=19)  # judged by the NodePool's creationTimestamp, not by when we looked
    described = await platform.describe("h100-t")
    assert described is not None and PlatformState.CREATING == described.state
    skew = timedelta(minutes=21)
    with pytest.raises(SliceFailed, match=r"not at target after 1200 s \(CURRENT 0/TARGET 1\)"):
        await platform.describe("h100-t")
    assert {} == fake_k8s.nodepools


async def test_a_status_without_documented_fields_fails_in_minutes_not_45(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """A NodePool whose status never shows CURRENT or a condition (here: only an undocumented `readyNodes`)
    fails after status_timeout, saying so, instead of waiting out node_ready_timeout (45 minutes)."""
    group = coreweave_group()  # defaults: status_timeout 300 s, node_ready_timeout 2700 s
    skew = timedelta()
    platform = CoreweavePlatform(group, now=lambda: datetime.now(UTC) + skew)
    await platform.create_slice("h100-u", group)
    fake_k8s.set_status("iris-h100-u", {"readyNodes": 1})
    described = await platform.describe("h100-u")
    assert described is not None and PlatformState.CREATING == described.state  # not READY on that field
    skew = timedelta(minutes=6)
    with pytest.raises(SliceFailed, match=r"no status \(no status\.currentNodes, no conditions\) after 300 s"):
        await platform.describe("h100-u")
    assert {} == fake_k8s.nodepools


async def test_at_target_by_condition_or_by_count(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """The node is there when CURRENT reaches TARGET, or when AtTarget is True, whichever the API reports."""
    group = coreweave_group()
    platform = CoreweavePlatform(group)
    for slice_id, status in [("h100-n", {"currentNodes": 1}),
                             ("h100-c2", {"conditions": [{"type": "AtTarget", "status": "True", "reason": "x"}]})]:
        await platform.create_slice(slice_id, group)
        fake_k8s.set_status(f"iris-{slice_id}", status)
        described = await platform.describe(slice_id)
        assert described is not None and PlatformState.READY == described.state, slice_id
        await platform.terminate(slice_id)


async def test_an_invalid_nodepool_condition_is_a_refusal(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """A NodePool that its controller marks not Valid is PlatformRefused (a config problem), and deleted."""
    group = coreweave_group()
    platform = CoreweavePlatform(group)
    await platform.create_slice("h100-iv", group)
    fake_k8s.set_status("iris-h100-iv", {"currentNodes": 0, "conditions": [
        {"type": "Valid", "status": "False", "reason": "InvalidInstanceType", "message": "not offered in LGA1"}]})
    with pytest.raises(PlatformRefused, match="NodePool invalid: Valid=False InvalidInstanceType not offered"):
        await platform.describe("h100-iv")
    assert {} == fake_k8s.nodepools


async def test_lost_node_under_a_ready_slice_is_preempted(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """When the node of a bootstrapped slice goes away, describe says PREEMPTED (the workflow ends the slice)."""
    group = coreweave_group()
    platform = CoreweavePlatform(group)
    await ready_slice(fake_k8s, platform, group, "h100-p")
    fake_k8s.set_current_nodes("iris-h100-p", 0)
    described = await platform.describe("h100-p")
    assert described is not None and PlatformState.PREEMPTED == described.state
    assert "NodePool has CURRENT 0/TARGET 1 nodes" == described.error


async def test_terminate_deletes_pods_then_waits_then_deletes_the_nodepool(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """terminate deletes the agent Pod, waits until it is gone, and only then deletes the NodePool."""
    group = coreweave_group()
    platform = CoreweavePlatform(group)
    await ready_slice(fake_k8s, platform, group, "h100-d")
    fake_k8s.pod_delete_delay = 0.5  # the Pod lingers with a deletionTimestamp, as a graceful stop does
    fake_k8s.calls.clear()

    await platform.terminate("h100-d")
    await platform.terminate("h100-d")  # already gone: fine

    assert {} == fake_k8s.pods and {} == fake_k8s.nodepools
    with fake_k8s.lock:
        calls = list(fake_k8s.calls)
    methods = [(c.method, c.path) for c in calls]
    assert ("GET", PODS) == methods[0]
    assert {"iris-managed": "true", "iris-slice-id": "h100-d"} == calls[0].selector
    assert ("DELETE", f"{PODS}/iris-worker-h100-d") == methods[1]
    nodepool_delete = methods.index(("DELETE", f"{NODEPOOLS}/iris-h100-d"))
    lists_between = [c for c in calls[2:nodepool_delete] if (c.method, c.path) == ("GET", PODS)]
    assert lists_between and lists_between[0].items == 1, "the Pod was still terminating at first"
    assert 0 == lists_between[-1].items, "the NodePool is deleted only once no Pod is left"
    assert 200 == calls[nodepool_delete].status
    # the second terminate found nothing: its deletes answer 404 and are fine
    assert [404] == [c.status for c in calls[nodepool_delete + 1 :] if c.method == "DELETE"]


async def test_orphans_are_listed_by_label_and_cleaned_up(
    fake_k8s: FakeKubernetes, coreweave_group: Callable[..., ScaleGroupSpec]
) -> None:
    """list_slices finds a group's NodePools and stray Pods by label selector only; terminate removes them."""
    group_a, group_b = coreweave_group("grp-a"), coreweave_group("grp-b")
    platform_a, platform_b = CoreweavePlatform(group_a), CoreweavePlatform(group_b)
    await platform_a.create_slice("grp-a-1", group_a)
    await ready_slice(fake_k8s, platform_a, group_a, "grp-a-2")
    await platform_b.create_slice("grp-b-1", group_b)
    with fake_k8s.lock:
        del fake_k8s.nodepools["iris-grp-a-2"]  # its NodePool went away behind Iris's back: a stray Pod
    fake_k8s.nodepools["iris-grp-a-1"]["metadata"]["labels"]["iris-managed"] = "false"  # not ours any more
    await platform_a.create_slice("grp-a-3", group_a)
    fake_k8s.calls.clear()

    found = await platform_a.list_slices({"iris-scale-group": "grp-a"})

    assert [("grp-a-2", PlatformState.PREEMPTED), ("grp-a-3", PlatformState.CREATING)] == [
        (s.slice_id, s.state) for s in found
    ]
    assert {"grp-a"} == {s.scale_group for s in found}
    with fake_k8s.lock:
        selectors = [(c.path, c.selector) for c in fake_k8s.calls]
    wanted = {"iris-managed": "true", "iris-scale-group": "grp-a"}
    assert [(NODEPOOLS, wanted), (PODS, wanted)] == selectors

    for orphan in found:
        await platform_a.terminate(orphan.slice_id)
    assert [] == await platform_a.list_slices({"iris-scale-group": "grp-a"})
    assert {"iris-grp-a-1", "iris-grp-b-1"} == set(fake_k8s.nodepools)
    assert [] == list(fake_k8s.pods)


def test_settings_errors_name_the_field(coreweave_group: Callable[..., ScaleGroupSpec]) -> None:
    """A bad `coreweave:` block is one line naming the field; so is a multi-host slice."""
    with pytest.raises(ValueError, match=r"^coreweave\.instanc_type: Extra inputs are not permitted$"):
        CoreweavePlatform(coreweave_group(instanc_type="x"))
    good = coreweave_group()
    missing = ScaleGroupSpec(**{**good.__dict__, "settings": {"instance_type": "gd-8xh100ib-i128"}})
    with pytest.raises(ValueError, match=r"^coreweave\.image: Field required$"):
        CoreweavePlatform(missing)
    with pytest.raises(ValueError, match=r"^coreweave\.pod_ready_timeout: Value error, expected seconds"):
        CoreweavePlatform(coreweave_group(pod_ready_timeout="soon"))
    with pytest.raises(ValueError, match="hosts_per_slice must be 1"):
        CoreweavePlatform(ScaleGroupSpec(**{**good.__dict__, "hosts_per_slice": 2}))
    assert 1200.0 == CoreweavePlatform(coreweave_group(node_ready_timeout="20m")).settings.node_ready_timeout


async def test_in_cluster_config_by_default(
    coreweave_group: Callable[..., ScaleGroupSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a kubeconfig the platform uses the Pod's ServiceAccount: its token, its CA, https to the service."""
    from kubernetes.config import incluster_config

    fake = FakeKubernetes(tls_dir=tmp_path / "tls", token="service-account-token")
    fake.start()
    try:
        (tmp_path / "token").write_text("service-account-token")
        monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
        monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(fake.ca_path))
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(fake.port))
        group = coreweave_group(kubeconfig=None, namespace="iris-in-cluster")
        platform = CoreweavePlatform(group)
        await platform.create_slice("h100-ic", group)
        assert await platform.describe("h100-ic") is not None
        await platform.terminate("h100-ic")
        with fake.lock:
            assert [("POST", NODEPOOLS), ("GET", f"{NODEPOOLS}/iris-h100-ic")] == [
                (c.method, c.path) for c in fake.calls[:2]
            ]
            assert all(c.authorized for c in fake.calls), "every call carries the ServiceAccount token"
    finally:
        fake.stop()
