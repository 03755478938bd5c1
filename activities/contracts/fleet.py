"""The fleet's contract: what the slice and autoscaler workflows, their activities and the platforms exchange.

Scale groups and slices as a platform describes them, the slice and autoscaler activities' names,
inputs and results, and the labels and error types every platform uses. Plain values and dataclasses
(travelling through Temporal as JSON), importing nothing of the activities' implementations: the
workflows import them from here (docs/architecture.md, the layout).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

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

SLICE_CREATE = "slice_create"
SLICE_WAIT_READY = "slice_wait_ready"
SLICE_BOOTSTRAP = "slice_bootstrap"
SLICE_WAIT_REGISTERED = "slice_wait_registered"
SLICE_WATCH = "slice_watch"
SLICE_WAIT_DRAINED = "slice_wait_drained"
SLICE_STILL_BUSY = "slice_still_busy"
SLICE_TERMINATE = "slice_terminate"
CLEANUP_ORPHANS = "cleanup_orphan_slices"
INVALID_SCALE_GROUP = "InvalidScaleGroup"
# A slice the cloud took back while it was being made or bootstrapped (workflows.fleet.autoscaler_workflow.PREEMPTED):
# a preemption, as of a READY slice (no back-off; a spot group's fallback counts it), not a failure.
SLICE_PREEMPTED = "SlicePreempted"

AUTOSCALE_PLAN = "autoscale_plan"

# How long a slice's long steps (create, bootstrap, wait, watch, drain, terminate) may go without a heartbeat before
# Temporal runs them again on another controller: what a controller that dies under a slice costs it
# (`autoscaler.slice_heartbeat_timeout`). They beat every 1-3 s (activities/slices.py), so not below the minimum.
SLICE_HEARTBEAT_SECONDS = 10.0
MIN_SLICE_HEARTBEAT_SECONDS = 5.0
MAX_SLICE_HEARTBEAT_SECONDS = 600.0
START_SLICE = "start_slice_workflow"
KNOWN_SLICES = "known_slices"


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


@dataclass
class SliceRequest:
    """One slice of one scale group: the input of every platform step."""

    slice_id: str
    group: ScaleGroupSpec


@dataclass
class RegistrationWait:
    slice_id: str
    group: ScaleGroupSpec
    timeout_seconds: float = 300.0


@dataclass
class DrainWait:
    worker_ids: list[str]
    timeout_seconds: float


@dataclass
class BusyCheck:
    worker_ids: list[str]


@dataclass
class OrphanCleanup:
    groups: list[ScaleGroupSpec] = field(default_factory=list)


def slice_worker_ids(slice_id: str, group: ScaleGroupSpec) -> list[str]:
    return [worker_id_for(slice_id, i) for i in range(group.hosts_per_slice)]


@dataclass
class GroupInput:
    """One scale group as the planner needs it, with the autoscaler's timing and backoff."""

    spec: ScaleGroupSpec
    min_slices: int
    max_slices: int
    scale_up_delay: float
    scale_down_delay: float
    last_scale_up: float | None = None
    backoff_until: float | None = None
    backoff_reason: str = ""
    buffer_slices: int = 0


@dataclass
class SliceViewInput:
    slice_id: str
    group: str
    state: str
    worker_ids: list[str] = field(default_factory=list)
    idle_since: float | None = None


@dataclass
class PlanInput:
    groups: list[GroupInput]
    slices: list[SliceViewInput]
    now: float


@dataclass
class PlanResult:
    create: dict[str, int] = field(default_factory=dict)
    remove: list[str] = field(default_factory=list)
    idle_since: dict[str, float | None] = field(default_factory=dict)
    unmet: dict[str, str] = field(default_factory=dict)
    group_reasons: dict[str, str] = field(default_factory=dict)
    pending_jobs: int = 0
    error: str = ""  # the scheduler could not be read: plan nothing this time
    recheck_after: float | None = None  # seconds until time alone changes the plan (absent in older histories)
    # What each group can still bring, for the scheduler's preemption rule
    # (workflows.scheduler.sharing_state.Headroom rows).
    headroom: list[list[Any]] = field(default_factory=list)


@dataclass
class StartSlice:
    """Start SliceWorkflow `slice_id` (idempotent: an existing one with this id is kept)."""

    slice_id: str
    workflow_input: Any  # workflows.fleet.slice_workflow.SliceInput, as JSON
    summary: str


@dataclass
class KnownSlice:
    slice_id: str
    group: str
    state: str
    worker_ids: list[str] = field(default_factory=list)


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
