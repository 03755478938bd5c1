"""CoreWeave: one slice = one NodePool custom resource (one bare-metal node) + one worker Pod on it.

Through the official `kubernetes` client, whose calls block: each runs in a thread
(`asyncio.to_thread`) so the controller's event loop keeps polling Temporal. What the
objects look like and what their status means lives in `coreweave_model` (pure); this
module makes the calls, and cleans up after itself when a slice fails:

    create_slice  POST NodePool (201; 409 means a retried call already made it; a refusal for quota is
                  QuotaExhausted, a 400/401/403/404/422 otherwise PlatformRefused)
    describe      GET NodePool + GET Pod -> assess(); quota/capacity -> QuotaExhausted, an invalid
                  NodePool -> PlatformRefused, a slice that will not come up -> SliceFailed (each
                  after deleting what exists). The node is there when the documented CURRENT
                  (status.currentNodes) reaches TARGET (spec.targetNodes), or AtTarget is True.
    bootstrap     POST Pod (nodeSelector iris-slice-id), then GET until Ready
    terminate     LIST Pods by label, DELETE each, wait until gone, DELETE NodePool
    list_slices   LIST NodePools and Pods by label selector (orphan cleanup)

These are exactly the verbs `infra/coreweave/k8s/rbac.yaml` grants; a test derives the
calls from the fake API server's request log and checks the two agree.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar, cast

import structlog
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from activities.contracts.fleet import (
    MANAGED_LABEL,
    SCALE_GROUP_LABEL,
    SLICE_ID_LABEL,
    ControlPlaneAddress,
    HostInfo,
    PlatformState,
    ScaleGroupSpec,
    SliceInfo,
    slice_labels,
    worker_id_for,
)
from activities.platforms.base import PlatformRefused, QuotaExhausted, SliceFailed
from activities.platforms.coreweave_model import (
    NODEPOOL_GROUP,
    NODEPOOL_PLURAL,
    NODEPOOL_VERSION,
    QUOTA_WORDS,
    Assessment,
    Settings,
    Verdict,
    assess,
    check_label_value,
    label_selector,
    nodepool_manifest,
    nodepool_name,
    pod_manifest,
    pod_name,
)

log = structlog.get_logger("iris.platform.coreweave")
T = TypeVar("T")

_STATE_OF = {
    Verdict.CREATING: PlatformState.CREATING,
    Verdict.READY: PlatformState.READY,
    Verdict.STARTING: PlatformState.READY,  # the node is there; the agent is coming up on it
    Verdict.PREEMPTED: PlatformState.PREEMPTED,
    Verdict.DELETING: PlatformState.DELETING,
    Verdict.QUOTA: PlatformState.FAILED,
    Verdict.INVALID: PlatformState.FAILED,
    Verdict.FAILED: PlatformState.FAILED,
}


class _Kube:
    """The blocking API calls, loaded lazily: in-cluster config by default, a kubeconfig file when given."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._core: k8s.CoreV1Api | None = None
        self._custom: k8s.CustomObjectsApi | None = None

    def _apis(self) -> tuple[k8s.CoreV1Api, k8s.CustomObjectsApi]:
        with self._lock:
            if self._core is None or self._custom is None:
                configuration = k8s.Configuration()
                if self._settings.kubeconfig:
                    k8s_config.load_kube_config(
                        config_file=self._settings.kubeconfig, client_configuration=configuration, persist_config=False
                    )
                else:
                    k8s_config.load_incluster_config(client_configuration=configuration)
                api_client = k8s.ApiClient(configuration)
                self._core, self._custom = k8s.CoreV1Api(api_client), k8s.CustomObjectsApi(api_client)
            return self._core, self._custom

    def _pod_dict(self, pod: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._apis()[0].api_client.sanitize_for_serialization(pod)
        return result

    # NodePools are cluster-scoped custom objects.
    def create_nodepool(self, body: dict[str, Any]) -> dict[str, Any]:
        result = self._apis()[1].create_cluster_custom_object(NODEPOOL_GROUP, NODEPOOL_VERSION, NODEPOOL_PLURAL, body)
        return cast(dict[str, Any], result)

    def get_nodepool(self, name: str) -> dict[str, Any] | None:
        try:
            result = self._apis()[1].get_cluster_custom_object(NODEPOOL_GROUP, NODEPOOL_VERSION, NODEPOOL_PLURAL, name)
            return cast(dict[str, Any], result)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def list_nodepools(self, selector: str) -> list[dict[str, Any]]:
        result = self._apis()[1].list_cluster_custom_object(
            NODEPOOL_GROUP, NODEPOOL_VERSION, NODEPOOL_PLURAL, label_selector=selector
        )
        return list(cast(dict[str, Any], result).get("items") or [])

    def delete_nodepool(self, name: str) -> None:
        try:
            self._apis()[1].delete_cluster_custom_object(NODEPOOL_GROUP, NODEPOOL_VERSION, NODEPOOL_PLURAL, name)
        except ApiException as e:
            if e.status != 404:
                raise

    # Worker Pods live in the configured namespace.
    def create_pod(self, body: dict[str, Any]) -> dict[str, Any]:
        # A plain dict body: every supported client version serializes it as is.
        return self._pod_dict(self._apis()[0].create_namespaced_pod(self._settings.namespace, cast(Any, body)))

    def get_pod(self, name: str) -> dict[str, Any] | None:
        try:
            return self._pod_dict(self._apis()[0].read_namespaced_pod(name, self._settings.namespace))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def list_pods(self, selector: str) -> list[dict[str, Any]]:
        pods = self._apis()[0].list_namespaced_pod(self._settings.namespace, label_selector=selector)
        return [self._pod_dict(p) for p in pods.items or []]

    def delete_pod(self, name: str, grace_seconds: int) -> None:
        try:
            self._apis()[0].delete_namespaced_pod(name, self._settings.namespace, grace_period_seconds=grace_seconds)
        except ApiException as e:
            if e.status != 404:
                raise


_CLIENTS: dict[Settings, _Kube] = {}
_CLIENTS_LOCK = threading.Lock()


def _kube_for(settings: Settings) -> _Kube:
    """One API client per cluster config: activities build a platform per call, connections are reused."""
    with _CLIENTS_LOCK:
        return _CLIENTS.setdefault(settings, _Kube(settings))


class KubernetesApiError(RuntimeError):
    """A refused API call, in one line: which call, the HTTP status, and the server's own message."""

    def __init__(self, call: str, e: ApiException) -> None:
        self.status = int(e.status or 0)
        try:
            message = str(json.loads(e.body or "{}").get("message") or e.reason)
        except (ValueError, AttributeError):
            message = str(e.reason)
        self.message = message
        super().__init__(f"kubernetes {call}: {self.status} {e.reason}: {message}")

    @property
    def quota(self) -> bool:
        """An admission webhook refusing a NodePool (or a ResourceQuota a Pod) for quota answers 403/422 and says so."""
        return self.status in (403, 422) and any(w in self.message.lower() for w in QUOTA_WORDS)

    @property
    def permanent(self) -> bool:
        """The same request will be refused again: bad request, unauthenticated, forbidden, not there (a 404
        on a create or list: the CRD or the namespace is missing), invalid. Quota is not permanent."""
        return self.status in (400, 401, 403, 404, 405, 422) and not self.quota


class CoreweavePlatform:
    """Slices on a CoreWeave (CKS) cluster. Every method is idempotent and keyed by slice id."""

    def __init__(self, group: ScaleGroupSpec, *, now: Callable[[], datetime] | None = None) -> None:
        self.settings = Settings.parse(group.settings)
        if group.hosts_per_slice != 1:
            raise ValueError(
                f"scale group {group.name}: hosts_per_slice must be 1 for platform coreweave "
                f"(one slice is one NodePool of one bare-metal node), got {group.hosts_per_slice}"
            )
        check_label_value(group.name, "scale group name")
        self.group = group
        self._kube = _kube_for(self.settings)
        self._now = now or (lambda: datetime.now(UTC))

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """A blocking client call, in a thread. A refusal for quota is QuotaExhausted, a permanent one
        PlatformRefused; others (409, 429, 5xx) are a one-line KubernetesApiError for the caller or a retry."""
        try:
            return await asyncio.to_thread(fn, *args)
        except ApiException as e:
            error = KubernetesApiError(fn.__name__, e)
        if error.quota:
            raise QuotaExhausted(f"{self.settings.instance_type}: {error}")
        if error.permanent:
            raise PlatformRefused(str(error))
        raise error

    async def create_slice(self, slice_id: str, group: ScaleGroupSpec) -> SliceInfo:
        """POST the NodePool; a 409 means an earlier attempt made it, so read that one instead."""
        check_label_value(slice_id, "slice id")
        body = nodepool_manifest(slice_id, group, self.settings)
        logger = log.bind(slice_id=slice_id, scale_group=group.name, nodepool=nodepool_name(slice_id))
        try:
            await self._call(self._kube.create_nodepool, body)
            logger.info("nodepool_created", instance_type=self.settings.instance_type)
        except KubernetesApiError as e:
            if e.status != 409:
                raise
            logger.info("nodepool_exists")
        return SliceInfo(slice_id, group.name, PlatformState.CREATING, labels=slice_labels(group.name, slice_id))

    async def _read(self, slice_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        nodepool = await self._call(self._kube.get_nodepool, nodepool_name(slice_id))
        pod = await self._call(self._kube.get_pod, pod_name(slice_id))
        return nodepool, pod

    async def _fail(self, slice_id: str, verdict: Assessment) -> NoReturn:
        """Delete what the slice had, then raise the error the activity layer expects."""
        log.warning("slice_failed", slice_id=slice_id, verdict=verdict.verdict.value, reason=verdict.reason)
        await self.terminate(slice_id)
        if verdict.verdict is Verdict.QUOTA:
            raise QuotaExhausted(f"{self.settings.instance_type}: {verdict.reason}")
        if verdict.verdict is Verdict.INVALID:
            raise PlatformRefused(f"{self.settings.instance_type}: {verdict.reason}")
        raise SliceFailed(verdict.reason)

    def _info(self, slice_id: str, labels: Mapping[str, str], verdict: Assessment) -> SliceInfo:
        host = HostInfo(0, verdict.address, worker_id_for(slice_id, 0), verdict.pod_state or verdict.reason)
        bad = (Verdict.QUOTA, Verdict.INVALID, Verdict.FAILED, Verdict.PREEMPTED)
        error = verdict.reason if verdict.verdict in bad else ""
        return SliceInfo(
            slice_id, labels.get(SCALE_GROUP_LABEL, ""), _STATE_OF[verdict.verdict], [host], dict(labels), error
        )

    async def describe(self, slice_id: str) -> SliceInfo | None:
        """The slice now; raises QuotaExhausted / SliceFailed (after deleting it) when it will not come up."""
        nodepool, pod = await self._read(slice_id)
        if nodepool is None and pod is None:
            return None
        if nodepool is None:
            assert pod is not None
            verdict = Assessment(Verdict.PREEMPTED, "NodePool is gone", pod_state="node gone")
            return self._info(slice_id, pod.get("metadata", {}).get("labels") or {}, verdict)
        verdict = assess(nodepool, pod, self.settings, self._now())
        if verdict.verdict in (Verdict.QUOTA, Verdict.INVALID, Verdict.FAILED):
            await self._fail(slice_id, verdict)
        return self._info(slice_id, nodepool.get("metadata", {}).get("labels") or {}, verdict)

    async def bootstrap(self, slice_id: str, group: ScaleGroupSpec, control: ControlPlaneAddress) -> None:
        """Start the agent Pod on the slice's node and wait until it is Ready (its /health answers).

        Idempotent: a Pod an earlier attempt created is waited for, a Pod that vanished is created again.
        """
        logger = log.bind(slice_id=slice_id, pod=pod_name(slice_id))
        while True:
            nodepool, pod = await self._read(slice_id)
            if nodepool is None:
                raise SliceFailed(f"NodePool {nodepool_name(slice_id)} is gone")
            verdict = assess(nodepool, pod, self.settings, self._now())
            match verdict.verdict:
                case Verdict.CREATING:
                    raise RuntimeError(f"bootstrap of {slice_id} before its node is ready: {verdict.reason}")
                case Verdict.QUOTA | Verdict.INVALID:
                    await self._fail(slice_id, verdict)
                case Verdict.FAILED | Verdict.PREEMPTED | Verdict.DELETING:
                    await self._fail(slice_id, Assessment(Verdict.FAILED, verdict.reason))
                case Verdict.READY if pod is not None:
                    logger.info("worker_pod_ready", address=verdict.address)
                    return
            if pod is None:
                try:
                    await self._call(self._kube.create_pod, pod_manifest(slice_id, group, self.settings, control))
                    logger.info("worker_pod_created", image=self.settings.image)
                except KubernetesApiError as e:
                    if e.status != 409:
                        raise
            if activity.in_activity():
                activity.heartbeat(verdict.pod_state or verdict.reason)
            await asyncio.sleep(self.settings.poll_interval)

    async def terminate(self, slice_id: str) -> None:
        """Pods first (the agent stops cleanly while its node still exists), then the NodePool."""
        logger = log.bind(slice_id=slice_id)
        selector = label_selector({MANAGED_LABEL: "true", SLICE_ID_LABEL: slice_id})
        pods = await self._call(self._kube.list_pods, selector)
        for pod in pods:
            await self._call(self._kube.delete_pod, pod["metadata"]["name"], 30)
            logger.info("worker_pod_deleted", pod=pod["metadata"]["name"])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.pod_delete_timeout
        while pods and loop.time() < deadline:
            pods = await self._call(self._kube.list_pods, selector)
            if pods:
                await asyncio.sleep(min(self.settings.poll_interval, 2.0))
        if pods:
            logger.warning("worker_pods_linger", pods=[p["metadata"]["name"] for p in pods])
        await self._call(self._kube.delete_nodepool, nodepool_name(slice_id))
        logger.info("nodepool_deleted", nodepool=nodepool_name(slice_id))

    async def list_slices(self, labels: Mapping[str, str]) -> list[SliceInfo]:
        """Every slice whose NodePool or Pod carries `labels` (and iris-managed); reads only, never deletes."""
        selector = label_selector({MANAGED_LABEL: "true", **labels})
        nodepools = await self._call(self._kube.list_nodepools, selector)
        pods = await self._call(self._kube.list_pods, selector)
        by_slice_pod = {p["metadata"]["labels"].get(SLICE_ID_LABEL, ""): p for p in pods}
        by_slice_pod.pop("", None)  # not one of ours after all
        now = self._now()
        slices = []
        for nodepool in nodepools:
            nodepool_labels = nodepool["metadata"].get("labels") or {}
            slice_id = nodepool_labels.get(SLICE_ID_LABEL, "")
            verdict = assess(nodepool, by_slice_pod.pop(slice_id, None), self.settings, now)
            slices.append(self._info(slice_id, nodepool_labels, verdict))
        for slice_id, pod in by_slice_pod.items():
            verdict = Assessment(Verdict.PREEMPTED, "NodePool is gone", pod_state="node gone")
            slices.append(self._info(slice_id, pod["metadata"]["labels"], verdict))
        return sorted(slices, key=lambda s: s.slice_id)
