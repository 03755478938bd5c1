"""`platform: gcp`: one Cloud TPU node per slice, through google-cloud-tpu's `tpu_v2` client.

The node is named after the slice and labelled `iris-managed`, `iris-scale-group`,
`iris-slice-id`, so a restarted controller finds it (`get_node`) and orphans are
listed by label. Its VMs' internal addresses come from the node's network
endpoints, in worker order; bootstrap starts the agent on each over SSH with
`--tpu-vm`, so the agent also reads the TPU's own facts from the metadata server.
Quota, resource-exhausted and stockout answers become `QuotaExhausted`; a READY
node the cloud takes back (PREEMPTED, TERMINATED) is described as PREEMPTED.

The client library is synchronous; its calls run in a thread. A loopback
`api_endpoint` (an emulator, or the tests' fake) is reached over an insecure
gRPC channel with anonymous credentials; any other one with Google's defaults.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import getpass
import hashlib
import ipaddress
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import structlog
from google.api_core import exceptions as gexc
from google.cloud import tpu_v2
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from activities.contracts.fleet import (
    MANAGED_LABEL,
    SCALE_GROUP_LABEL,
    SLICE_ID_LABEL,
    ControlPlaneAddress,
    HostInfo,
    PlatformState,
    ScaleGroupSpec,
    SliceInfo,
    host_attributes,
    slice_labels,
    worker_id_for,
)
from activities.platforms import remote_agent
from activities.platforms.base import PlatformRefused, QuotaExhausted, SliceFailed
from activities.platforms.gcp_zones import ZoneBackoff
from activities.platforms.ssh import SshError, SshTarget, SshTransport
from scheduler.spot import CAPACITY_ATTRIBUTE, Capacity, CapacityPolicy
from scheduler.tpu import tpu_vm_count

log = structlog.get_logger(__name__)

KIND = "gcp"  # the remote state directory's name under the Iris home on each VM
CALL_TIMEOUT = 60.0  # one API call
# How long create/terminate wait for their operation: less than the slice activities' own 10 minutes.
# A create still running then is CREATING (the caller polls describe); a delete still running, DELETING.
CREATE_TIMEOUT = 5 * 60.0
DELETE_TIMEOUT = 5 * 60.0
STOP_AGENT_TIMEOUT = 30.0  # a VM about to be deleted gets this long to stop its agent cleanly

State = tpu_v2.Node.State
# The node's state as the platform reports it. A node the cloud took back is PREEMPTED
# (its tasks count as preempted); a stopped or hidden node cannot run Iris work: FAILED.
NODE_STATES: dict[Any, PlatformState] = {
    State.STATE_UNSPECIFIED: PlatformState.CREATING,
    State.CREATING: PlatformState.CREATING,
    State.STARTING: PlatformState.CREATING,
    State.RESTARTING: PlatformState.CREATING,
    State.REIMAGING: PlatformState.CREATING,
    State.UNHIDING: PlatformState.CREATING,
    State.REPAIRING: PlatformState.CREATING,
    State.READY: PlatformState.READY,
    State.PREEMPTED: PlatformState.PREEMPTED,
    State.TERMINATED: PlatformState.PREEMPTED,
    State.DELETING: PlatformState.DELETING,
    State.STOPPING: PlatformState.FAILED,
    State.STOPPED: PlatformState.FAILED,
    State.HIDING: PlatformState.FAILED,
    State.HIDDEN: PlatformState.FAILED,
    State.UNKNOWN: PlatformState.FAILED,
}

# Words in an API error that mean "no capacity for you now" rather than "this request is wrong".
_QUOTA_WORDS = re.compile(r"quota|stockout|resource[_ ]exhausted|capacity|no more .* available", re.IGNORECASE)
# Answers that the same request will get again however often it is sent: a config or permission problem
# (403, 401, 400 invalid argument such as an unknown accelerator type or runtime version, 501).
# (Not all of 400: FAILED_PRECONDITION and OUT_OF_RANGE may pass, and a quota refusal may come as any of these.)
_PERMANENT = (gexc.PermissionDenied, gexc.Forbidden, gexc.Unauthenticated, gexc.Unauthorized, gexc.InvalidArgument,
              gexc.MethodNotImplemented)  # fmt: skip


def classify(error: gexc.GoogleAPICallError, reason: str) -> Exception:
    """The platform error a Google API error means: quota (back off), a permanent refusal, or a failed slice.

    Quota words win over the status code: some quota refusals arrive as 403 or FAILED_PRECONDITION.
    """
    if isinstance(error, gexc.ResourceExhausted) or _QUOTA_WORDS.search(_reason(error)):
        return QuotaExhausted(reason)
    if isinstance(error, _PERMANENT):
        return PlatformRefused(reason)
    return SliceFailed(reason)


class SshSettings(BaseModel):
    """How the controller reaches the TPU VMs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user: str | None = Field(default=None, description="SSH login user on the VMs; default: the controller's")
    identity_file: str | None = Field(default=None, description="private key file; default: the keys asyncssh finds")
    port: int = Field(default=22, ge=1, le=65535, description="the VMs' SSH port")


class SpotFallbackSettings(BaseModel):
    """`spot_fallback:` of a `spot_then_on_demand` group (scheduler.spot.SpotFallback)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    after_preemptions: int = Field(
        default=2, ge=1, description="this many of the group's spot slices preempted within `within` (or spot "
        "stocked out in every zone) make new slices on-demand",
    )  # fmt: skip
    within: str | float = Field(default="1h", json_schema_extra={"doc_type": "duration"},
                                description="the window the preemptions are counted in (30m, 1h, ...)")  # fmt: skip
    hold: str | float = Field(default="2h", json_schema_extra={"doc_type": "duration"},
                              description="how long new slices are on-demand before spot again")  # fmt: skip


class Settings(BaseModel):
    """The `gcp:` block of a scale group."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    project: str = Field(min_length=1, description="the Google Cloud project")
    zone: str | None = Field(
        default=None, min_length=1, description="where the TPU nodes are created, e.g. `us-central2-b` (or `zones`)"
    )
    zones: list[str] = Field(
        default=[],
        validate_default=True,
        description="instead of `zone`: tried in order, a zone that answers stockout or quota is skipped for "
        "`zone_backoff`",
    )
    zone_backoff: float = Field(
        default=300.0, gt=0, description="seconds a stocked-out zone is skipped (doubling in a row, to 8x)"
    )
    accelerator_type: str = Field(min_length=1, description="the node's type, e.g. `v5litepod-16`")
    runtime_version: str = Field(min_length=1, description="the TPU VM image, e.g. `v2-alpha-tpuv5-lite`")
    spot: bool | None = Field(default=None, description="spot (preemptible) capacity: a synonym of `capacity: spot`")
    capacity: Literal["on_demand", "spot", "spot_then_on_demand"] | None = Field(
        default=None,
        json_schema_extra={"doc_type": "on_demand, spot or spot_then_on_demand"},
        description="`on_demand` (the default), `spot`, or `spot_then_on_demand`: spot, and on-demand for a while "
        "when `spot_fallback` says so",
    )
    spot_fallback: SpotFallbackSettings = Field(
        default=SpotFallbackSettings(),
        description="with `capacity: spot_then_on_demand`: when new slices go on-demand, and for how long",
    )
    network: str | None = Field(default=None, description="VPC network; default: the project's default")
    service_account: str | None = Field(default=None, description="the VMs' service account e-mail")
    api_endpoint: str | None = Field(
        default=None, description="`host:port` of the TPU API; default: Google's (loopback: no TLS, for emulators)"
    )
    ssh: SshSettings = Field(default=SshSettings(), description="how the controller reaches the VMs")
    worker_command: str | None = Field(
        default=None, description="the agent command before its flags; default: `iris worker serve` on PATH"
    )
    env: remote_agent.AgentEnv = Field(
        default={}, description="environment exported for the agent, after (and over) Iris's own variables"
    )

    @field_validator("zones")
    @classmethod
    def _one_way_to_name_zones(cls, zones: list[str], info: ValidationInfo) -> list[str]:
        zone = info.data.get("zone")
        if (zone is None) == (not zones):
            raise ValueError("give `zone` or `zones` (a list), not both" if zones else "`zone` or `zones` is required")
        if len(set(zones)) != len(zones) or any(not z for z in zones):
            raise ValueError("must name distinct, non-empty zones")
        return zones

    def capacity_policy(self) -> CapacityPolicy:
        """The block's capacity rule (ValueError naming the field when `spot`, `capacity`, `spot_fallback` disagree)."""
        given = {"spot", "capacity", "spot_fallback"} & self.model_fields_set
        return CapacityPolicy.parse(self.model_dump(include=given))

    @model_validator(mode="after")
    def _capacity(self) -> Settings:
        self.capacity_policy()
        return self

    @property
    def wants_spot(self) -> bool:
        """Whether a slice made with these settings is spot (a fallback's slice comes with `capacity: on_demand`)."""
        return self.capacity_policy().kind != Capacity.ON_DEMAND

    @property
    def zone_list(self) -> list[str]:
        """The zones slices may be created in, in the order they are tried."""
        return list(self.zones) if self.zones else [self.zone or ""]

    def parent(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}"


def node_id_for(slice_id: str) -> str:
    """A valid TPU node id for a slice: lowercase letters, digits and hyphens, starting with a letter."""
    node_id = re.sub(r"[^a-z0-9-]", "-", slice_id.lower()).strip("-")
    return node_id if node_id[:1].isalpha() else f"iris-{node_id}"


NODE_ID_MAX = 63  # a Cloud TPU node id is at most 63 characters


def zonal_node_id(slice_id: str, zone: str) -> str:
    """The node id of a slice of a multi-zone group in `zone`: the slice's, then the zone, so the node names
    where it is (the console, `gcloud compute tpus tpu-vm list`). Too long, the slice id's middle goes (its
    end is its unique part)."""
    node_id, suffix = node_id_for(slice_id), f"-{zone}"
    room = NODE_ID_MAX - len(suffix)
    if len(node_id) > room:
        node_id = node_id[: room - 9].rstrip("-") + node_id[-9:]
    return node_id + suffix


def _is_loopback(endpoint: str) -> bool:
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


CAPACITY_LABEL = "iris-capacity"  # the node's label: spot or on_demand
ZONE_ATTRIBUTE = "zone"  # every gcp worker's attribute (and its slice's label in `describe`): the node's zone
# (project, slice id) -> the zone its node is in, so describe asks that zone first; a restart just asks them all
_ZONE_OF: dict[tuple[str, str], str] = {}
_BACKOFFS: dict[Callable[[], float], ZoneBackoff] = {}


def _backoff_for(clock: Callable[[], float]) -> ZoneBackoff:
    """The process's stocked-out zones (one record per clock: tests pass their own)."""
    with _clients_lock:
        return _BACKOFFS.setdefault(clock, ZoneBackoff(clock))


def zone_of(node: tpu_v2.Node) -> str:
    """`projects/p/locations/ZONE/nodes/id` -> ZONE."""
    return node.name.split("/locations/", 1)[-1].split("/", 1)[0]


_clients: dict[str | None, tpu_v2.TpuClient] = {}
_clients_lock = threading.Lock()


def tpu_client(api_endpoint: str | None) -> tpu_v2.TpuClient:
    """One client (one channel) per endpoint for the process: platforms are made per call, channels are not."""
    with _clients_lock:
        client = _clients.get(api_endpoint)
        if client is None:
            if api_endpoint and _is_loopback(api_endpoint):
                import grpc
                from google.auth.credentials import AnonymousCredentials
                from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcTransport

                transport = TpuGrpcTransport(
                    channel=grpc.insecure_channel(api_endpoint), credentials=AnonymousCredentials()
                )
                client = tpu_v2.TpuClient(transport=transport)
            else:
                options = {"api_endpoint": api_endpoint} if api_endpoint else None
                client = tpu_v2.TpuClient(client_options=options)
            _clients[api_endpoint] = client
        return client


def _reason(error: Exception) -> str:
    message = getattr(error, "message", None) or str(error)
    return " ".join(str(message).split())


def _status(error: gexc.GoogleAPICallError) -> str:
    """`PERMISSION_DENIED: the message`: the gRPC status name an operator can look up, and the reason."""
    code = getattr(error.grpc_status_code, "name", "") or (str(error.code) if error.code else "")
    return f"{code}: {_reason(error)}" if code else _reason(error)


class GcpPlatform:
    """Slices as Cloud TPU nodes; the node (its name, zone and labels) is the durable record."""

    def __init__(self, group: ScaleGroupSpec, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.group = group
        self.settings = Settings.model_validate(group.settings)
        self._backoff = _backoff_for(clock)
        # Stocked-out zones are remembered per accelerator type *and* block: a changed block (another
        # runtime version, spot, a zone added) starts with every zone untried, in every controller.
        block = hashlib.sha256(self.settings.model_dump_json().encode()).hexdigest()[:12]
        self._scope = f"{self.settings.accelerator_type}@{block}"
        try:
            vms = tpu_vm_count(self.settings.accelerator_type)
        except ValueError:
            vms = None  # a type Iris's table does not know: the node's network endpoints will tell
        if vms is not None and vms != group.hosts_per_slice:
            raise ValueError(f"scale group {group.name}: hosts_per_slice must be {vms} for gcp.accelerator_type "
                             f"{self.settings.accelerator_type} (one host per TPU VM), got {group.hosts_per_slice}")

    @property
    def client(self) -> tpu_v2.TpuClient:
        """Made on first use, so checking a config needs no credentials."""
        return tpu_client(self.settings.api_endpoint)

    def _node_id(self, zone: str, slice_id: str) -> str:
        """The slice's node id in `zone`: the slice id, with the zone after it in a group that lists `zones`
        (each zone has its own name for the slice's node, so a retried create still finds it)."""
        return zonal_node_id(slice_id, zone) if self.settings.zones else node_id_for(slice_id)

    def _node_name(self, zone: str, slice_id: str) -> str:
        return f"{self.settings.parent(zone)}/nodes/{self._node_id(zone, slice_id)}"

    async def _call(self, fn: Any, /, **kwargs: Any) -> Any:
        """A blocking client call in a thread; a permanent refusal (403, 401, 400, ...) is PlatformRefused."""
        try:
            return await asyncio.to_thread(fn, **kwargs)
        except _PERMANENT as e:
            if _QUOTA_WORDS.search(_reason(e)):
                raise
            what = getattr(fn, "__name__", "call")
            where = kwargs.get("parent") or str(kwargs.get("name", "")).split("/nodes/")[0]
            raise PlatformRefused(f"gcp: {what} in {where} refused: {_status(e)}") from None

    async def _get(self, zone: str, slice_id: str) -> tpu_v2.Node | None:
        try:
            return await self._call(self.client.get_node, name=self._node_name(zone, slice_id), timeout=CALL_TIMEOUT)
        except gexc.NotFound:
            return None

    async def _find(self, slice_id: str) -> tpu_v2.Node | None:
        """The slice's node in whichever zone it is (the zone it was last seen in is asked first)."""
        zones = self.settings.zone_list
        known = _ZONE_OF.get((self.settings.project, slice_id))
        for zone in ([known] if known in zones else []) + [z for z in zones if z != known]:
            node = await self._get(zone, slice_id)
            if node is not None:
                _ZONE_OF[(self.settings.project, slice_id)] = zone
                return node
        return None

    def _info(self, node: tpu_v2.Node) -> SliceInfo:
        labels = {**node.labels, ZONE_ATTRIBUTE: zone_of(node)}
        slice_id = labels.get(SLICE_ID_LABEL) or node.name.rsplit("/", 1)[-1]
        port = self.settings.ssh.port
        hosts = [
            HostInfo(index=i, address=e.ip_address if port == 22 else f"{e.ip_address}:{port}",
                     worker_id=worker_id_for(slice_id, i), state=node.state.name)
            for i, e in enumerate(node.network_endpoints)
        ]
        state = NODE_STATES.get(node.state, PlatformState.FAILED)
        error = node.health_description or "; ".join(s.details for s in node.symptoms if s.details)
        if state == PlatformState.PREEMPTED and not error:
            error = f"node {node.state.name.lower()}"
        expected = self.group.hosts_per_slice
        if state == PlatformState.READY and labels.get(SCALE_GROUP_LABEL) == self.group.name and len(hosts) != expected:
            # the node is the authority on its VM count: a slice that is not hosts_per_slice hosts cannot serve
            state, error = PlatformState.FAILED, f"node has {len(hosts)} VMs, the group's hosts_per_slice is {expected}"
        return SliceInfo(slice_id=slice_id, scale_group=labels.get(SCALE_GROUP_LABEL, ""), state=state,
                         hosts=hosts, labels=labels, error=error)

    # -- the Platform protocol --------------------------------------------------------------------------

    async def create_slice(self, slice_id: str, group: ScaleGroupSpec) -> SliceInfo:
        """Create the slice's node (or find it, in any zone) in the first zone with capacity.

        A zone answering stockout or quota is recorded as backing off and the next one is tried; when
        no zone is left, QuotaExhausted names every zone and why.
        """
        node = await self._find(slice_id)
        if node is not None:
            return self._info(node)
        s = self.settings
        if len(s.zone_list) == 1:  # one zone: always asked; the autoscaler backs the whole group off
            return await self._create_in(s.zone_list[0], slice_id, group)
        tried: dict[str, Exception] = {}  # zone -> why not there, this time
        for zone in self._backoff.usable(s.project, self._scope, s.zone_list):
            try:
                info = await self._create_in(zone, slice_id, group)
            except (QuotaExhausted, PlatformRefused) as e:
                # a refusal may be the zone's own (a type it does not offer): the next zone may still take it
                delay = self._backoff.exhausted(s.project, self._scope, zone, str(e), s.zone_backoff)
                log.warning("gcp_zone_skipped", slice_id=slice_id, zone=zone, backoff=delay, reason=str(e))
                tried[zone] = e
                continue
            self._backoff.succeeded(s.project, self._scope, zone)
            log.info("gcp_zone_chosen", slice_id=slice_id, zone=zone, after=[str(e) for e in tried.values()])
            earlier = [z for z in s.zone_list[: s.zone_list.index(zone)] if z not in tried]
            passed = [f"{z}: {e}" for z, e in tried.items()] + self._backoff.skipped(s.project, self._scope, earlier)
            return replace(info, placement=f"in {zone}" + (f" ({'; '.join(passed)})" if passed else ""))
        skipped = self._backoff.skipped(s.project, self._scope, [z for z in s.zone_list if z not in tried])
        why = "; ".join([*(str(e) for e in tried.values()), *skipped])
        if len(tried) == len(s.zone_list) and all(isinstance(e, PlatformRefused) for e in tried.values()):
            raise PlatformRefused(f"gcp: every zone refused: {why}")  # asked everywhere, refused everywhere
        raise QuotaExhausted(f"gcp: no zone has {s.accelerator_type} capacity: {why}")

    async def _create_in(self, zone: str, slice_id: str, group: ScaleGroupSpec) -> SliceInfo:
        """Create the node in one zone and wait for its operation; quota -> QuotaExhausted (nothing left)."""
        s = self.settings
        request = tpu_v2.Node(
            accelerator_type=s.accelerator_type, runtime_version=s.runtime_version,
            labels={**slice_labels(group.name, slice_id), CAPACITY_LABEL: "spot" if s.wants_spot else "on_demand"},
            scheduling_config=tpu_v2.SchedulingConfig(spot=s.wants_spot),
            network_config=tpu_v2.NetworkConfig(network=s.network or "", enable_external_ips=False),
        )
        if s.service_account:
            request.service_account = tpu_v2.ServiceAccount(email=s.service_account)
        log.info("gcp_node_create", slice_id=slice_id, node=self._node_name(zone, slice_id), type=s.accelerator_type)
        _ZONE_OF[(s.project, slice_id)] = zone
        try:
            operation = await self._call(self.client.create_node, parent=s.parent(zone),
                                         node_id=self._node_id(zone, slice_id), node=request, timeout=CALL_TIMEOUT)
            await asyncio.to_thread(operation.result, timeout=CREATE_TIMEOUT)  # its error is classified below
        except gexc.AlreadyExists:
            pass  # an earlier attempt's create is under way: describe tells how far it got
        except (concurrent.futures.TimeoutError, gexc.RetryError):
            pass  # still creating after CREATE_TIMEOUT: the caller polls describe
        except PlatformRefused:
            raise  # the call itself was refused: nothing was made
        except gexc.GoogleAPICallError as e:  # the create operation failed
            await self._delete_quietly(zone, slice_id)
            what = f"gcp: node {self._node_id(zone, slice_id)} ({s.accelerator_type} in {zone})"
            raise classify(e, f"{what}: {_status(e)}") from None
        node = await self._get(zone, slice_id)
        if node is None:
            raise SliceFailed(f"gcp: node {self._node_id(zone, slice_id)} vanished right after its create operation")
        return self._info(node)

    async def _delete_quietly(self, zone: str, slice_id: str) -> None:
        """Delete what a failed create may have left; errors are logged, the create's error is what matters."""
        try:
            await self._delete(self._node_name(zone, slice_id))
        except Exception as e:
            log.warning("gcp_cleanup_failed", slice_id=slice_id, zone=zone, error=_reason(e))

    async def _delete(self, node_name: str) -> None:
        try:
            operation = await self._call(self.client.delete_node, name=node_name, timeout=CALL_TIMEOUT)
            await self._call(operation.result, timeout=DELETE_TIMEOUT)
        except gexc.NotFound:
            pass
        except (concurrent.futures.TimeoutError, gexc.RetryError):
            log.warning("gcp_node_delete_slow", node=node_name, waited=DELETE_TIMEOUT)

    async def describe(self, slice_id: str) -> SliceInfo | None:
        """The node's state, zone and its VMs' internal addresses; None when there is no node in any zone."""
        node = await self._find(slice_id)
        return None if node is None else self._info(node)

    def _transport(self, node_id: str, host: HostInfo) -> SshTransport:
        ssh = self.settings.ssh
        address = host.address.rsplit(":", 1)[0] if ssh.port != 22 else host.address
        return SshTransport(SshTarget(
            host=address, port=ssh.port, user=ssh.user or getpass.getuser(),
            identity_file=Path(ssh.identity_file).expanduser() if ssh.identity_file else None,
            # VM addresses are reused by later slices: the host key belongs to this node's VM
            host_key_alias=f"{node_id}-{host.index}",
        ))

    async def bootstrap(self, slice_id: str, group: ScaleGroupSpec, control: ControlPlaneAddress) -> None:
        """Start the agent on every VM over SSH (a VM whose agent runs is left alone)."""
        info = await self.describe(slice_id)
        if info is None or info.state != PlatformState.READY:
            why = "has no node" if info is None else f"is {info.state.value}"
            raise SshError(f"gcp: cannot bootstrap slice {slice_id}: it {why}")
        node_id = self._node_id(info.labels[ZONE_ATTRIBUTE], slice_id)
        capacity = info.labels.get(CAPACITY_LABEL) or ("spot" if self.settings.wants_spot else "on_demand")

        async def start(host: HostInfo) -> None:
            attributes = {**host_attributes(group, slice_id, host.index), ZONE_ATTRIBUTE: info.labels[ZONE_ATTRIBUTE],
                          CAPACITY_ATTRIBUTE: capacity}  # fmt: skip
            argv = [*remote_agent.agent_argv(host.worker_id, attributes, group, control), "--tpu-vm"]
            command = self.settings.worker_command or remote_agent.DEFAULT_WORKER_COMMAND
            script = remote_agent.start_script(remote_agent.host_dir(KIND, host.worker_id), command, argv, control,
                                               env=self.settings.env)  # fmt: skip
            out = await remote_agent.run_checked(self._transport(node_id, host), script, "starting the agent")
            log.info("gcp_agent", slice_id=slice_id, host=host.address, worker_id=host.worker_id, result=out.strip())

        await asyncio.gather(*(start(h) for h in info.hosts))

    async def list_slices(self, labels: Mapping[str, str]) -> list[SliceInfo]:
        """Every Iris node in the group's zones whose labels include `labels`."""
        nodes: list[tpu_v2.Node] = []
        for zone in self.settings.zone_list:
            pages = await self._call(self.client.list_nodes, parent=self.settings.parent(zone), timeout=CALL_TIMEOUT)
            nodes += await asyncio.to_thread(list, pages)
        wanted = {MANAGED_LABEL: "true", **labels}
        return [self._info(n) for n in nodes if all(n.labels.get(k) == v for k, v in wanted.items())]

    async def terminate(self, slice_id: str) -> None:
        """Stop the agents (best effort: the VMs are going) and delete the node; no node is fine."""
        node = await self._find(slice_id)
        info = None if node is None else self._info(node)
        if node is None or info is None or info.state == PlatformState.DELETING:
            return  # gone, or an earlier call's delete is under way
        if info.state == PlatformState.READY:
            node_id = node.name.rsplit("/", 1)[-1]

            async def stop(host: HostInfo) -> None:
                script = remote_agent.stop_script(remote_agent.host_dir(KIND, host.worker_id), host.worker_id)
                try:
                    await self._transport(node_id, host).run(script, timeout=STOP_AGENT_TIMEOUT)
                except SshError as e:
                    log.warning("gcp_agent_stop_failed", slice_id=slice_id, host=host.address, error=str(e))

            await asyncio.gather(*(stop(h) for h in info.hosts))
        log.info("gcp_node_delete", slice_id=slice_id, node=node.name)
        await self._delete(node.name)
        _ZONE_OF.pop((self.settings.project, slice_id), None)
