"""infra/coreweave/k8s: every manifest is a valid Kubernetes object, and the RBAC grants what the platform calls.

Validation goes through the `kubernetes` client's own models: each document is read into
its model class (V1Deployment, V1ClusterRole, ...) and written back; a misspelled or
misplaced field does not survive the round trip, a wrongly typed one does not parse.
The RBAC check derives (verb, apiGroup, resource, namespace) from the fake API server's
request log while the real platform runs a slice through every path, and requires the
grants bound to the controller's ServiceAccount to cover exactly those calls.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from activities.contracts.fleet import ControlPlaneAddress, ScaleGroupSpec
from activities.platforms.base import QuotaExhausted, SliceFailed
from activities.platforms.coreweave import CoreweavePlatform
from activities.platforms.coreweave_model import TLS_DIR, Settings
from iris.config.cluster_file import parse_config
from tests.platforms.k8s_fake import Call, FakeKubernetes

MANIFESTS = Path(__file__).resolve().parents[2] / "infra" / "coreweave" / "k8s"
MODELS: dict[str, type] = {
    "Namespace": k8s.V1Namespace,
    "ServiceAccount": k8s.V1ServiceAccount,
    "ClusterRole": k8s.V1ClusterRole,
    "ClusterRoleBinding": k8s.V1ClusterRoleBinding,
    "Role": k8s.V1Role,
    "RoleBinding": k8s.V1RoleBinding,
    "ConfigMap": k8s.V1ConfigMap,
    "Secret": k8s.V1Secret,
    "Deployment": k8s.V1Deployment,
}
_PATH_RE = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[^/]+)"
    r"(?:/(?P<name>[^/]+))?$"
)


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def applied() -> list[dict[str, Any]]:
    """Every object `kubectl apply -k` creates, in kustomization order."""
    kustomization = documents("kustomization.yaml")[0]
    return [doc for name in kustomization["resources"] for doc in documents(name)]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in applied() if d["kind"] == kind]


def to_model(api: k8s.ApiClient, doc: dict[str, Any]) -> Any:
    """The client's own deserializer (what it does with a server's answer): the same call in every client
    version, where the public `deserialize` changed its signature between kubernetes 36 and 37."""
    return api._ApiClient__deserialize(doc, MODELS[doc["kind"]].__name__)  # type: ignore[attr-defined]


def _strip_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_none(v) for v in value]
    return value


@pytest.mark.parametrize("name", sorted(p.name for p in MANIFESTS.glob("*.yaml") if p.name != "kustomization.yaml"))
def test_every_manifest_is_a_valid_kubernetes_object(name: str) -> None:
    """Each document reads into the client's model for its kind and writes back unchanged."""
    api = k8s.ApiClient()
    docs = documents(name)
    assert docs
    for doc in docs:
        model = to_model(api, doc)
        assert MODELS[doc["kind"]] is type(model)
        round_trip = api.sanitize_for_serialization(model)
        assert _strip_none(doc) == round_trip, f"{name}: {doc['kind']} {doc['metadata']['name']} lost fields"


def test_kustomization_applies_everything_but_the_secret_example() -> None:
    """`kubectl apply -k` creates every manifest; the Secret stays the operator's to write."""
    listed = documents("kustomization.yaml")[0]["resources"]
    on_disk = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml", "temporal-secret.example.yaml"}
    assert sorted(on_disk) == sorted(listed)
    assert [] == by_kind("Secret")


def test_controller_deployment_wiring() -> None:
    """Probes hit /health on the port `--health-port` opens; config, Secret and ServiceAccount all exist."""
    (deployment,) = by_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert ["controller", "serve"] == args[:2]
    health_port = int(args[args.index("--health-port") + 1])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        assert "/health" == container[probe]["httpGet"]["path"]
        assert health_port == ports[container[probe]["httpGet"]["port"]]
    assert deployment["spec"]["replicas"] >= 2, "controllers are stateless: run more than one"

    service_accounts = {(sa["metadata"]["namespace"], sa["metadata"]["name"]) for sa in by_kind("ServiceAccount")}
    assert (deployment["metadata"]["namespace"], pod["serviceAccountName"]) in service_accounts
    assert [{"secretRef": {"name": "iris-temporal"}}] == container["envFrom"]
    secret_example = {d["metadata"]["name"]: d for d in documents("temporal-secret.example.yaml")}
    assert {"IRIS_TEMPORAL_ADDRESS", "IRIS_TEMPORAL_NAMESPACE", "IRIS_TEMPORAL_API_KEY"} <= set(
        secret_example["iris-temporal"]["stringData"]
    )
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert TLS_DIR == mounts["temporal-tls"]
    assert "iris-temporal-tls" == volumes["temporal-tls"]["secret"]["secretName"]
    config_map = volumes["config"]["configMap"]["name"]
    (config,) = [c for c in by_kind("ConfigMap") if c["metadata"]["name"] == config_map]
    config_arg = Path(args[args.index("--config") + 1])
    assert Path(mounts["config"]) == config_arg.parent
    assert config_arg.name in config["data"]
    store_ref = next(e for e in container["env"] if e["name"] == "IRIS_STORE")["valueFrom"]["configMapKeyRef"]
    assert store_ref["key"] in config["data"] and config_map == store_ref["name"]


def _cluster_config_groups() -> list[ScaleGroupSpec]:
    (config,) = by_kind("ConfigMap")
    parsed = parse_config(yaml.safe_load(config["data"]["cluster.yaml"]), "cluster.yaml")
    groups = []
    for g in parsed.scale_groups:
        spec = ScaleGroupSpec(
            name=g.name, platform=g.platform.value, hosts_per_slice=g.hosts_per_slice, cpu_millis=g.cpu_millis,
            memory_bytes=g.memory_bytes, gpus=g.gpus, attributes=dict(g.attributes), runtime=g.runtime.value,
            settings=dict(g.extra),
        )  # fmt: skip
        groups.append(spec)
    return groups


def test_cluster_config_map_is_a_valid_coreweave_config() -> None:
    """The ConfigMap's cluster.yaml loads as Iris config and every coreweave block makes a platform."""
    groups = _cluster_config_groups()
    assert ["coreweave"] == sorted({g.platform for g in groups})
    (namespace,) = by_kind("Namespace")
    for group in groups:
        platform = CoreweavePlatform(group)
        assert namespace["metadata"]["name"] == platform.settings.namespace
        assert platform.settings.kubeconfig is None, "in the cluster, the controller uses its ServiceAccount"
        assert "iris-temporal" == platform.settings.env_secret


# -- RBAC -------------------------------------------------------------------------------------------------


def request_verb(call: Call) -> tuple[str, str, str, str | None]:
    """(verb, apiGroup, resource, namespace) of one request, as the API server's authorizer sees it."""
    match = _PATH_RE.match(call.path)
    assert match is not None, call.path
    named = match["name"] is not None
    verb = {
        "GET": "get" if named else ("watch" if call.query.get("watch") == "true" else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }[call.method]
    return verb, match["group"] or "", match["resource"], match["ns"]


def granted(account: tuple[str, str]) -> Rules:
    """The rules bound to a ServiceAccount, each with the namespace it is limited to (None: cluster-wide)."""
    roles = {("ClusterRole", None, r["metadata"]["name"]): r for r in by_kind("ClusterRole")}
    roles |= {("Role", r["metadata"]["namespace"], r["metadata"]["name"]): r for r in by_kind("Role")}
    rules = []
    for binding in by_kind("ClusterRoleBinding") + by_kind("RoleBinding"):
        subjects = {(s["namespace"], s["name"]) for s in binding["subjects"] if s["kind"] == "ServiceAccount"}
        if account not in subjects:
            continue
        scope = binding["metadata"].get("namespace")  # a RoleBinding limits even a ClusterRole to its namespace
        ref = binding["roleRef"]
        role = roles[(ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])]
        rules += [(rule, scope) for rule in role["rules"]]
    return rules


Rules = list[tuple[dict[str, Any], str | None]]


def allows(rules: Rules, verb: str, group: str, resource: str, ns: str | None) -> bool:
    return any(
        verb in rule["verbs"] and group in rule["apiGroups"] and resource in rule["resources"]
        and (scope is None or scope == ns)
        for rule, scope in rules
    )  # fmt: skip


async def exercise_every_path(fake: FakeKubernetes, group: ScaleGroupSpec) -> None:
    """Run slices through every platform path: create (and its retry), describe, bootstrap, list, terminate,
    a quota condition and a failed Pod, so the request log holds every call the platform can make."""
    platform = CoreweavePlatform(group)
    control = ControlPlaneAddress("temporal:7233", "default", "s3://bucket/iris")

    await platform.create_slice("s-ok", group)
    await platform.create_slice("s-ok", group)
    await platform.describe("s-ok")
    fake.set_current_nodes("iris-s-ok", 1)
    boot = asyncio.create_task(platform.bootstrap("s-ok", group, control))
    await fake.wait_for_pod(platform.settings.namespace, "iris-worker-s-ok")
    fake.set_pod_ready(platform.settings.namespace, "iris-worker-s-ok")
    await asyncio.wait_for(boot, 30)
    await platform.list_slices({})
    await platform.terminate("s-ok")

    await platform.create_slice("s-quota", group)
    fake.add_condition("iris-s-quota", "AtTarget", "False", "InsufficientCapacity")
    with pytest.raises(QuotaExhausted):
        await platform.describe("s-quota")

    await platform.create_slice("s-bad", group)
    fake.set_current_nodes("iris-s-bad", 1)
    boot = asyncio.create_task(platform.bootstrap("s-bad", group, control))
    await fake.wait_for_pod(platform.settings.namespace, "iris-worker-s-bad")
    fake.set_pod_waiting(platform.settings.namespace, "iris-worker-s-bad", "InvalidImageName")
    with pytest.raises(SliceFailed):
        await asyncio.wait_for(boot, 30)


async def test_rbac_grants_exactly_the_calls_the_platform_makes(fake_k8s: FakeKubernetes, tmp_path: Path) -> None:
    """Every call the platform makes is allowed for the controller's ServiceAccount, and nothing else is."""
    (group,) = _cluster_config_groups()
    kubeconfig = fake_k8s.write_kubeconfig(tmp_path / "kubeconfig")
    test_group = ScaleGroupSpec(**{**group.__dict__, "settings": {**group.settings, "kubeconfig": str(kubeconfig),
                                                                  "poll_interval": 0.05}})  # fmt: skip
    await exercise_every_path(fake_k8s, test_group)

    with fake_k8s.lock:
        used = {request_verb(c) for c in fake_k8s.calls}
    (deployment,) = by_kind("Deployment")
    account = (deployment["metadata"]["namespace"], deployment["spec"]["template"]["spec"]["serviceAccountName"])
    rules = granted(account)
    denied = sorted(str(u) for u in used if not allows(rules, *u))
    assert [] == denied, "calls the platform makes that the RBAC manifests do not grant"

    used_without_ns = {(verb, grp, res) for verb, grp, res, _ in used}
    granted_triples = {
        (verb, grp, res) for rule, _ in rules for verb in rule["verbs"] for grp in rule["apiGroups"]
        for res in rule["resources"]
    }  # fmt: skip
    assert used_without_ns == granted_triples, "the RBAC grants something the platform never does"
    expected = {
        (verb, grp, res)
        for grp, res in (("compute.coreweave.com", "nodepools"), ("", "pods"))
        for verb in ("create", "get", "list", "delete")
    }
    assert expected == used_without_ns
    assert all("*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"] for rule, _ in rules)
    pod_namespaces = {ns for verb, grp, res, ns in used if res == "pods"}
    assert {Settings.parse(group.settings).namespace} == pod_namespaces


def test_the_rbac_check_notices_a_missing_grant() -> None:
    """The checker itself: a Role without `delete` does not allow deleting a Pod."""
    rules: Rules = [({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, "iris")]
    call = Call("DELETE", "/api/v1/namespaces/iris/pods/p", 200)
    assert ("delete", "", "pods", "iris") == request_verb(call)
    assert not allows(rules, *request_verb(call))
    assert not allows(rules, "get", "", "pods", "other-namespace")
    assert allows(rules, "get", "", "pods", "iris")
