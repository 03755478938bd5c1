"""The Platform protocol: where a scale group's slices come from (local processes, SSH hosts, GCP TPU, CoreWeave).

A slice is `hosts_per_slice` hosts created, bootstrapped and deleted together. Every
step is keyed by the slice id and idempotent: a retried activity or a restarted
controller calls it again and must find what the first call made, never make a
second slice. A platform finds what Iris made by its labels (`iris-managed`,
`iris-scale-group`, `iris-slice-id`), so orphans can be listed and cleaned up.

Expected outcomes are values (`SliceInfo.state`); three failures are exceptions
because the activity layer turns them into non-retryable `ApplicationError`s of a
distinct type: `QuotaExhausted` (the platform refused for quota/capacity: the
group backs off), `PlatformRefused` (the request as configured can never succeed:
permission denied, invalid argument, unknown accelerator type; the group backs off
long) and `SliceFailed` (the platform failed this slice; it has already cleaned up
what it created). Anything else is transient and retried.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

AttributeValue = str | int | float | bool

# Labels (and worker attributes) every Iris-made slice and host carries.
MANAGED_LABEL = "iris-managed"
SCALE_GROUP_LABEL = "iris-scale-group"
SLICE_ID_LABEL = "iris-slice-id"
# Coscheduling attributes each host of a slice gets (the scheduler groups by tpu-name).
SLICE_NAME_ATTRIBUTE = "tpu-name"
HOST_INDEX_ATTRIBUTE = "tpu-worker-id"

QUOTA_EXHAUSTED = "QuotaExhausted"  # ApplicationError type: the group backs off
PLATFORM_REFUSED = "PlatformRefused"  # ApplicationError type: permanent refusal, the group backs off long
SLICE_FAILED = "SliceFailed"  # ApplicationError type: this slice is gone, try another


class QuotaExhausted(Exception):  # noqa: N818 - named after the ApplicationError type it becomes
    """The platform refused to create a slice for quota, stockout or capacity reasons."""


class PlatformRefused(Exception):  # noqa: N818 - named after the ApplicationError type it becomes
    """The platform refused the request as made (forbidden, invalid argument, unknown type): retrying it
    unchanged cannot succeed, only a change of config or permissions can."""


class SliceFailed(Exception):  # noqa: N818 - named after the ApplicationError type it becomes
    """The platform failed this slice (and has cleaned up whatever it had created for it)."""


class PlatformState(StrEnum):
    """The platform's own view of a slice, as `describe` reports it."""

    CREATING = "CREATING"  # infrastructure not ready yet
    READY = "READY"  # every host reachable: bootstrap may start
    FAILED = "FAILED"  # the platform gave up on it (error says why)
    PREEMPTED = "PREEMPTED"  # it was READY and the platform took it away
    DELETING = "DELETING"


@dataclass
class ScaleGroupSpec:
    """What a platform needs to know of a scale group; travels through Temporal as JSON.

    `settings` is the platform's own config block (`manual:`, `gcp:`, `coreweave:`),
    validated by the platform module.
    """

    name: str
    platform: str
    hosts_per_slice: int
    cpu_millis: int
    memory_bytes: int
    gpus: int = 0
    tpus: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    runtime: str = "process"  # an activities.contracts.RuntimeName; the agents' --runtime
    settings: dict[str, Any] = field(default_factory=dict)
    image: str = ""  # the agents' --default-image (container runtimes)


@dataclass
class ControlPlaneAddress:
    """Where a bootstrapped agent finds the control plane: the Temporal frontend and the store."""

    temporal_address: str
    namespace: str
    store_url: str
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. TLS settings for the agent


@dataclass
class HostInfo:
    """One host of a slice: its index in the slice, how to reach it, the worker id its agent uses."""

    index: int
    address: str  # "host" or "host:port"
    worker_id: str
    state: str = ""  # the platform's own word for the host, for `iris slice list`


@dataclass
class SliceInfo:
    """`describe`/`list_slices` answer: the platform's view of one slice."""

    slice_id: str
    scale_group: str
    state: PlatformState
    hosts: list[HostInfo] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    error: str = ""
    # `create_slice`'s words on where the slice was made and why there, e.g. "in us-east5-a (us-central2-b:
    # RESOURCE_EXHAUSTED ...)": shown by `iris autoscaler status`. "" when there was no choice to make.
    placement: str = ""


class Platform(Protocol):
    """One cloud or host pool. Every method is idempotent and keyed by slice id."""

    async def create_slice(self, slice_id: str, group: ScaleGroupSpec) -> SliceInfo:
        """Ask for the slice (or find the one a previous call asked for). Raises QuotaExhausted."""
        ...

    async def describe(self, slice_id: str) -> SliceInfo | None:
        """The slice as the platform sees it now; None when it does not exist."""
        ...

    async def bootstrap(self, slice_id: str, group: ScaleGroupSpec, control: ControlPlaneAddress) -> None:
        """Start the worker agent on every host with the slice's attributes (again, if already started)."""
        ...

    async def list_slices(self, labels: Mapping[str, str]) -> list[SliceInfo]:
        """Every slice Iris made whose labels include `labels` (for orphan cleanup)."""
        ...

    async def terminate(self, slice_id: str) -> None:
        """Stop the agents and delete the slice; a slice that is already gone is fine."""
        ...


def worker_id_for(slice_id: str, index: int) -> str:
    """The worker id of host `index` of a slice: stable, so a re-bootstrapped agent is the same worker."""
    return f"{slice_id}-{index}"


def slice_labels(group_name: str, slice_id: str) -> dict[str, str]:
    """The labels a platform puts on everything it creates for a slice."""
    return {MANAGED_LABEL: "true", SCALE_GROUP_LABEL: group_name, SLICE_ID_LABEL: slice_id}


def host_attributes(group: ScaleGroupSpec, slice_id: str, index: int) -> dict[str, AttributeValue]:
    """The worker attributes of host `index`: the group's, then the slice's coscheduling and Iris labels."""
    return {
        **group.attributes,
        SLICE_NAME_ATTRIBUTE: slice_id,
        HOST_INDEX_ATTRIBUTE: index,
        SLICE_ID_LABEL: slice_id,
        SCALE_GROUP_LABEL: group.name,
    }
