"""CoreWeave slices as Kubernetes objects: the settings block, the manifests, and how to read their status.

Everything here is pure (no I/O, no clock of its own), so the rules for what a NodePool
and a worker Pod look like and what their status means are tested without a server;
`coreweave.py` does the API calls. One slice is one NodePool custom resource
(`compute.coreweave.com/v1alpha1`, cluster-scoped) asking for one bare-metal node,
plus one worker Pod pinned to that node by the `iris-slice-id` node label.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from activities.contracts.fleet import (
    SLICE_ID_LABEL,
    ControlPlaneAddress,
    ScaleGroupSpec,
    host_attributes,
    slice_labels,
    worker_id_for,
)
from scheduler.attributes import value_text

NODEPOOL_GROUP = "compute.coreweave.com"
NODEPOOL_VERSION = "v1alpha1"
NODEPOOL_PLURAL = "nodepools"
NODEPOOL_KIND = "NodePool"
WORKER_CONTAINER = "iris-worker"
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
TLS_DIR = "/etc/iris/tls"  # where the controller Deployment and worker Pods mount the Temporal TLS files

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")
_DURATION_UNITS = {None: 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(value: object) -> object:
    """Timeouts read as seconds or as "30s" / "20m" / "1h", like the rest of the config file."""
    if isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match is None:
            raise ValueError(f"expected seconds or a duration like '30s', '20m', '1h', got {value!r}")
        return float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    return value


Seconds = Annotated[
    float, BeforeValidator(_seconds), Field(gt=0, json_schema_extra={"doc_type": "seconds (or `30s`, `20m`, `1h`)"})
]


class Settings(BaseModel):
    """The `coreweave:` block of a scale group. Unknown keys are errors (a typo is never ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(default="iris", description="the namespace of the worker Pods")
    instance_type: str = Field(min_length=1, description="the node type, e.g. `gd-8xh100ib-i128` (immutable)")
    image: str = Field(min_length=1, description="the worker image (`iris worker serve` on its PATH)")
    kubeconfig: str | None = Field(
        default=None, description="a kubeconfig file; default: in-cluster config (the controller runs as a Pod)"
    )
    node_ready_timeout: Seconds = Field(
        default=2700.0, description="how long a NodePool may take to reach TARGET (bare metal joins in 20-30 min)"
    )
    status_timeout: Seconds = Field(
        default=300.0, description="a NodePool that reports neither CURRENT nor a condition by then fails"
    )
    pod_ready_timeout: Seconds = Field(default=600.0, description="image pull + agent start + first `/health`")
    pod_delete_timeout: Seconds = Field(
        default=120.0, description="terminate waits this long for the Pod before deleting the NodePool"
    )
    poll_interval: Seconds = Field(default=10.0, description="how often the API is read while waiting")
    health_port: int = Field(default=8081, ge=1, le=65535, description="the agent's `/health`, probed for readiness")
    gpu_resource: str = Field(default="nvidia.com/gpu", description="the extended resource GPUs are limited by")
    rdma: int = Field(default=0, ge=0, description="`rdma/ib` devices per worker Pod (InfiniBand instance types)")
    env_secret: str | None = Field(
        default=None, description="a Secret whose keys become the agent's environment (Temporal address, API key)"
    )
    tls_secret: str | None = Field(
        default=None, description="a Secret of TLS files mounted at `/etc/iris/tls` (`IRIS_TEMPORAL_TLS_*`)"
    )
    image_pull_secrets: tuple[str, ...] = Field(default=(), description="Secrets to pull the worker image with")
    max_restarts: int = Field(default=3, ge=0, description="a worker container crash-looping past this fails the slice")
    # The node directory that is the agent's IRIS_HOME, mounted at the same path: task areas the agent hands
    # to containerd must exist on the node where the agent sees them, and its state outlives a restart.
    host_dir: str = Field(
        default="/var/lib/iris", pattern=r"^/", description="the node directory that is the agent's `IRIS_HOME`"
    )

    @classmethod
    def parse(cls, data: Mapping[str, Any] | None, where: str = "coreweave") -> Settings:
        """Validate a config block; a mistake is one ValueError line naming the field."""
        try:
            return cls.model_validate(dict(data or {}))
        except ValidationError as e:
            first = e.errors()[0]
            path = ".".join(str(p) for p in (where, *first["loc"]))
            raise ValueError(f"{path}: {first['msg']}") from None


def k8s_name(prefix: str, slice_id: str) -> str:
    """A DNS-1123 name for a slice's object; a hash suffix keeps two ids that sanitize alike apart."""
    clean = re.sub(r"[^a-z0-9-]+", "-", slice_id.lower()).strip("-")
    if clean != slice_id or len(prefix) + len(clean) > 62:
        digest = hashlib.sha256(slice_id.encode()).hexdigest()[:8]
        clean = f"{clean[: 62 - len(prefix) - 9]}-{digest}".strip("-")
    return f"{prefix}{clean}"


def nodepool_name(slice_id: str) -> str:
    return k8s_name("iris-", slice_id)


def pod_name(slice_id: str) -> str:
    return k8s_name("iris-worker-", slice_id)


_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")


def check_label_value(value: str, what: str) -> None:
    """Kubernetes label values are at most 63 characters of [A-Za-z0-9_.-], alphanumeric at both ends."""
    if not _LABEL_VALUE_RE.match(value):
        raise ValueError(f"{what}: {value!r} is not a valid Kubernetes label value")


def label_selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def nodepool_manifest(slice_id: str, group: ScaleGroupSpec, settings: Settings) -> dict[str, Any]:
    """One node of the group's instance type; `autoscaling: false` so Iris alone decides how many exist."""
    labels = slice_labels(group.name, slice_id)
    return {
        "apiVersion": f"{NODEPOOL_GROUP}/{NODEPOOL_VERSION}",
        "kind": NODEPOOL_KIND,
        "metadata": {"name": nodepool_name(slice_id), "labels": labels},
        "spec": {
            "instanceType": settings.instance_type,
            "autoscaling": False,
            "targetNodes": 1,
            "nodeLabels": labels,
        },
    }


def worker_args(slice_id: str, group: ScaleGroupSpec, settings: Settings) -> list[str]:
    """`iris worker serve` for host 0 of the slice, with the slice's attributes and the group's capacity."""
    args = [
        "worker", "serve",
        "--runtime", group.runtime,
        "--worker-id", worker_id_for(slice_id, 0),
        "--cpu", f"{group.cpu_millis / 1000:g}",
        "--memory", str(group.memory_bytes),
        "--gpus", str(group.gpus),
        "--health-port", str(settings.health_port),
        "--health-host", "0.0.0.0",  # the kubelet probes the Pod's (host network: the node's) address
    ]  # fmt: skip
    if group.image:
        args += ["--default-image", group.image]
    for key, value in sorted(host_attributes(group, slice_id, 0).items()):
        args += ["--attribute", f"{key}={value_text(value)}"]
    return args


def pod_manifest(
    slice_id: str, group: ScaleGroupSpec, settings: Settings, control: ControlPlaneAddress
) -> dict[str, Any]:
    """The agent Pod: on the slice's node (nodeSelector), host networking, GPU/RDMA limits, ready on /health."""
    labels = slice_labels(group.name, slice_id)
    env = {
        "IRIS_HOME": settings.host_dir,
        "IRIS_TEMPORAL_ADDRESS": control.temporal_address,
        "IRIS_TEMPORAL_NAMESPACE": control.namespace,
        "IRIS_STORE": control.store_url,
        **control.extra_env,
    }
    limits: dict[str, str] = {}
    if group.gpus:
        limits[settings.gpu_resource] = str(group.gpus)
    if settings.rdma:
        limits["rdma/ib"] = str(settings.rdma)
    container: dict[str, Any] = {
        "name": WORKER_CONTAINER,
        "image": settings.image,
        "command": ["iris"],
        "args": worker_args(slice_id, group, settings),
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": settings.health_port},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "resources": {"limits": limits} if limits else {},
    }
    if settings.env_secret:
        container["envFrom"] = [{"secretRef": {"name": settings.env_secret}}]
    spec: dict[str, Any] = {
        "nodeSelector": {SLICE_ID_LABEL: slice_id},
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
    }
    if group.gpus:
        spec["tolerations"] = [{"key": settings.gpu_resource, "operator": "Exists", "effect": "NoSchedule"}]
    mounts: list[dict[str, Any]] = [{"name": "iris-home", "mountPath": settings.host_dir}]
    volumes: list[dict[str, Any]] = [
        {"name": "iris-home", "hostPath": {"path": settings.host_dir, "type": "DirectoryOrCreate"}}
    ]
    if group.runtime == "containerd":
        # The agent starts task containers through the node's CRI socket, not inside its own Pod.
        mounts.append({"name": "containerd", "mountPath": CONTAINERD_SOCKET})
        volumes.append({"name": "containerd", "hostPath": {"path": CONTAINERD_SOCKET, "type": "Socket"}})
    if settings.tls_secret:
        mounts.append({"name": "temporal-tls", "mountPath": TLS_DIR, "readOnly": True})
        volumes.append({"name": "temporal-tls", "secret": {"secretName": settings.tls_secret}})
    container["volumeMounts"] = mounts
    spec["volumes"] = volumes
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(slice_id), "namespace": settings.namespace, "labels": labels},
        "spec": spec,
    }


# -- reading status ---------------------------------------------------------------------------------------


class Verdict(StrEnum):
    """What a NodePool and its Pod say about the slice."""

    CREATING = "CREATING"  # node not there yet (or Pod starting, within its timeout)
    READY = "READY"  # node there; Pod absent (bootstrap may start) or Ready
    STARTING = "STARTING"  # node there, Pod created but not Ready yet, within its timeout
    QUOTA = "QUOTA"  # the NodePool reports quota or capacity trouble: the group backs off
    INVALID = "INVALID"  # the NodePool is invalid as configured (e.g. its instance type): the group backs off long
    FAILED = "FAILED"  # this slice will not come up (timeout, no status at all, failed Pod)
    PREEMPTED = "PREEMPTED"  # the node went away under a bootstrapped slice
    DELETING = "DELETING"


@dataclass(frozen=True)
class Assessment:
    verdict: Verdict
    reason: str = ""
    address: str = ""  # the node's address (host networking: the Pod's host IP), once known
    pod_state: str = ""  # for `iris slice list`


# Words in a NodePool condition's type/reason that mean "no capacity or quota for this instance type".
QUOTA_WORDS = ("quota", "capacity", "stockout")
# Condition types that are True when something is wrong.
PROBLEM_TYPE_WORDS = ("exceeded", "insufficient", "stockout")
# Condition types that, when False for another reason, mean the NodePool itself is unusable.
INVALID_CONDITION_TYPES = ("Valid", "Validated")
AT_TARGET = "AtTarget"  # True once CURRENT has reached TARGET
# Pod waiting reasons no amount of waiting fixes.
FATAL_WAITING_REASONS = ("InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError")


def parse_time(text: str | None) -> datetime | None:
    """RFC 3339 timestamps as the API server writes them ("2026-01-02T03:04:05Z")."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _age(obj: Mapping[str, Any], now: datetime) -> float:
    created = parse_time(obj.get("metadata", {}).get("creationTimestamp"))
    return 0.0 if created is None else (now - created).total_seconds()


def _condition_text(cond: Mapping[str, Any]) -> str:
    parts = [f"{cond.get('type')}={cond.get('status')}", cond.get("reason") or "", cond.get("message") or ""]
    return " ".join(p for p in parts if p)


def _nodepool_problem(nodepool: Mapping[str, Any]) -> tuple[Verdict, str] | None:
    """A quota/capacity condition, or a NodePool the provider refuses outright."""
    for cond in nodepool.get("status", {}).get("conditions") or []:
        kind = str(cond.get("type", "")).lower()
        # Most conditions say something good when True ("AtTarget"); a few name the problem ("QuotaExceeded").
        names_problem = any(w in kind for w in PROBLEM_TYPE_WORDS)
        failing = cond.get("status") == ("True" if names_problem else "False")
        words = f"{kind} {cond.get('reason', '')}".lower()
        if failing and any(w in words for w in QUOTA_WORDS):
            return Verdict.QUOTA, _condition_text(cond)
        if cond.get("type") in INVALID_CONDITION_TYPES and cond.get("status") == "False":
            return Verdict.INVALID, f"NodePool invalid: {_condition_text(cond)}"
    return None


def _condition(nodepool: Mapping[str, Any], type_: str) -> str | None:
    """The status ("True", "False", "Unknown") of one condition, None when the NodePool has none of that type."""
    for cond in nodepool.get("status", {}).get("conditions") or []:
        if cond.get("type") == type_:
            return str(cond.get("status"))
    return None


def node_count(nodepool: Mapping[str, Any]) -> tuple[int, int | None, bool]:
    """(TARGET, CURRENT, there): `kubectl get nodepool`'s documented columns, `spec.targetNodes` and
    `status.currentNodes` (Nodes booted, registered with the Node Pool and present in the cluster; None
    while the status has no such field), and whether the node is there: CURRENT has reached TARGET, or
    the `AtTarget` condition says so."""
    target = int(nodepool.get("spec", {}).get("targetNodes", 1) or 0)
    raw = nodepool.get("status", {}).get("currentNodes")
    current = int(raw) if raw is not None else None
    there = (current is not None and current >= target) or _condition(nodepool, AT_TARGET) == "True"
    return target, current, there


def _has_status(nodepool: Mapping[str, Any]) -> bool:
    """Whether the NodePool reports anything Iris reads: CURRENT or a condition (its controller has seen it)."""
    status = nodepool.get("status") or {}
    return status.get("currentNodes") is not None or bool(status.get("conditions"))


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _pod_problem(pod: Mapping[str, Any], settings: Settings) -> str | None:
    """Why the worker Pod will never serve, or None while it still might."""
    status = pod.get("status", {})
    if status.get("phase") in ("Failed", "Succeeded"):
        return f"worker Pod {status.get('phase')}: {status.get('reason') or status.get('message') or 'exited'}"
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason", "")
        if reason in FATAL_WAITING_REASONS:
            return f"worker Pod {reason}: {waiting.get('message', '')}".strip()
        if reason == "CrashLoopBackOff" and cs.get("restartCount", 0) > settings.max_restarts:
            return f"worker Pod CrashLoopBackOff after {cs.get('restartCount')} restarts"
    return None


def _pod_state(pod: Mapping[str, Any]) -> str:
    status = pod.get("status", {})
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return f"{status.get('phase', 'Pending')} ({waiting.get('reason', 'waiting')})"
    return f"{status.get('phase', 'Pending')}{', ready' if _pod_ready(pod) else ''}"


def assess(nodepool: Mapping[str, Any], pod: Mapping[str, Any] | None, settings: Settings, now: datetime) -> Assessment:
    """The slice's state from its NodePool and Pod: the one place that interprets their status.

    Timeouts count from each object's creationTimestamp, so a restarted controller
    judges a slice by how long it has really been waiting, not since it looked.
    """
    if nodepool.get("metadata", {}).get("deletionTimestamp"):
        return Assessment(Verdict.DELETING, "NodePool is being deleted")
    problem = _nodepool_problem(nodepool)
    if problem is not None:
        return Assessment(problem[0], problem[1])
    target, current, there = node_count(nodepool)
    counts = f"CURRENT {'-' if current is None else current}/TARGET {target}"
    if not there:
        if pod is not None:
            # The agent was started on this node, so the node existed: it was taken away.
            return Assessment(Verdict.PREEMPTED, f"NodePool has {counts} nodes")
        age = _age(nodepool, now)
        if not _has_status(nodepool) and age > settings.status_timeout:
            return Assessment(
                Verdict.FAILED,
                f"NodePool reports no status (no status.currentNodes, no conditions) after "
                f"{settings.status_timeout:g} s: is the cluster's NodePool controller reconciling it?",
            )
        if age > settings.node_ready_timeout:
            timeout = settings.node_ready_timeout
            return Assessment(Verdict.FAILED, f"NodePool not at target after {timeout:g} s ({counts})")
        return Assessment(Verdict.CREATING, f"waiting for the node: {counts}")
    if pod is None:
        return Assessment(Verdict.READY, f"node there ({counts})")
    pod_status = pod.get("status", {})
    address = pod_status.get("hostIP") or pod_status.get("podIP") or ""
    state = _pod_state(pod)
    failure = _pod_problem(pod, settings)
    if failure is not None:
        return Assessment(Verdict.FAILED, failure, address, state)
    if _pod_ready(pod):
        return Assessment(Verdict.READY, "worker Pod ready", address, state)
    if _age(pod, now) > settings.pod_ready_timeout:
        return Assessment(
            Verdict.FAILED, f"worker Pod not Ready after {settings.pod_ready_timeout:g} s: {state}", address, state
        )
    return Assessment(Verdict.STARTING, state, address, state)
