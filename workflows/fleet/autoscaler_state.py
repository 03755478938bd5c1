"""The autoscaler's state and what it publishes: plain dataclasses, handed whole to continue-as-new.

Apart from `workflows/fleet/autoscaler_workflow.py` so the workflow module holds only orchestration, and so
readers of the published status (the CLI, the dashboard) need not import the workflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from activities.contracts.fleet import PLATFORM_REFUSED, QUOTA_EXHAUSTED, SLICE_HEARTBEAT_SECONDS, ScaleGroupSpec
from scheduler.spot import FallbackRecord
from workflows.fleet.slice_lifecycle import SliceState

SCAN_INTERVAL = timedelta(seconds=5)  # the default scan interval (`autoscaler.scan_interval` in the config)
BACKOFF_BASE_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 600.0
FAILURES_BEFORE_BACKOFF = 2  # bootstrap failures in a row before a group backs off (quota: at once)
# A permanent refusal (forbidden, invalid argument): at once and long, doubling; a retry cannot succeed
# until someone changes the config or the permissions.
REFUSED_BACKOFF_SECONDS = 600.0
REFUSED_BACKOFF_MAX_SECONDS = 3600.0


@dataclass
class ScaleGroup:
    """One configured scale group: what its slices are, and how many of them may exist when."""

    spec: ScaleGroupSpec
    min_slices: int = 0
    max_slices: int = 1
    scale_up_delay: float = 0.0
    scale_down_delay: float = 300.0
    buffer_slices: int = 0  # idle READY slices kept beyond demand


@dataclass
class AutoscalerConfig:
    """Signal `configure`: the scale groups (from the controller's config file) and slice timeouts."""

    groups: list[ScaleGroup] = field(default_factory=list)
    registration_timeout_seconds: float = 300.0
    drain_timeout_seconds: float = 600.0  # how long a scaled-down slice lets running tasks finish
    scan_interval_seconds: float = SCAN_INTERVAL.total_seconds()  # how often it looks while slices may change
    backoff_seconds: float = BACKOFF_BASE_SECONDS  # a group's first back-off after failed slices (`autoscaler.backoff`)
    slice_heartbeat_seconds: float = SLICE_HEARTBEAT_SECONDS  # `autoscaler.slice_heartbeat_timeout`


@dataclass
class SliceEntry:
    slice_id: str
    group: str
    state: SliceState
    worker_ids: list[str] = field(default_factory=list)
    idle_since: float | None = None
    error: str = ""
    capacity: str = ""  # spot or on_demand (scheduler.spot.Capacity) on a platform that has both; else ""


@dataclass
class GroupRuntime:
    last_scale_up: float | None = None
    backoff_until: float | None = None
    backoff_reason: str = ""
    failures: int = 0  # slices of this group that failed in a row
    last_error: str = ""
    last_error_type: str = ""  # its kind: QuotaExhausted, PlatformRefused, SliceFailed, ...
    last_decision: str = ""  # the last scale-up, scale-down or back-off, in words
    last_decision_at: float = 0.0
    last_placement: str = ""  # where its newest slice was made and why there (multi-zone platforms)
    spot: FallbackRecord = field(default_factory=FallbackRecord)  # capacity: spot_then_on_demand's memory

    def fail(self, error: str, error_type: str, now: float, base: float = BACKOFF_BASE_SECONDS) -> float | None:
        """Count a failed slice; the back-off it starts in seconds (at once on quota or refusal), or None.
        `base` is the first back-off of quota or failures, doubling from there (a refusal's is its own)."""
        self.failures += 1
        self.last_error, self.last_error_type = error, error_type
        quota = error_type == QUOTA_EXHAUSTED
        if error_type == PLATFORM_REFUSED:
            delay = min(REFUSED_BACKOFF_MAX_SECONDS, REFUSED_BACKOFF_SECONDS * 2 ** (self.failures - 1))
            self.backoff_reason = f"refused by the platform (a config or permission problem): {error}"
        elif quota or self.failures >= FAILURES_BEFORE_BACKOFF:
            k = self.failures if quota else self.failures - FAILURES_BEFORE_BACKOFF + 1
            delay = min(BACKOFF_MAX_SECONDS, base * 2 ** (k - 1))
            self.backoff_reason = (
                f"quota exhausted: {error}" if quota else f"{self.failures} slices failed in a row, last: {error}"
            )
        else:
            return None
        self.backoff_until = now + delay
        return delay


@dataclass
class AutoscalerState:
    config: AutoscalerConfig | None = None
    slices: dict[str, SliceEntry] = field(default_factory=dict)
    groups: dict[str, GroupRuntime] = field(default_factory=dict)
    unmet: dict[str, str] = field(default_factory=dict)
    group_reasons: dict[str, str] = field(default_factory=dict)
    pending_jobs: int = 0  # jobs waiting for a place at the last plan
    recovered: bool = False  # running slices were read back from visibility (first run only)
    cleanup_needed: bool = False  # orphan cleanup after a (re)configuration


@dataclass
class GroupStatus:
    name: str
    platform: str
    min_slices: int
    max_slices: int
    slices: dict[str, list[str]]  # state -> slice ids
    reason: str = ""  # why it is not scaling up now ("" when it is free to)
    backoff_reason: str = ""
    backoff_seconds: float = 0.0
    last_error: str = ""
    last_error_type: str = ""
    last_decision: str = ""
    last_decision_at: float = 0.0
    idle_since: dict[str, float] = field(default_factory=dict)  # idle READY slice -> since when
    scale_down_delay: float = 0.0
    buffer_slices: int = 0
    last_placement: str = ""  # e.g. "slice tpu-3 in us-east5-a (us-central2-b: RESOURCE_EXHAUSTED ...)"
    capacity_policy: str = ""  # the group's `capacity` ("" on a platform without one)
    capacity: dict[str, str] = field(default_factory=dict)  # slice id -> spot | on_demand
    fallback_reason: str = ""  # why new slices are on-demand now ("" when they are not)
    fallback_until: float = 0.0  # until when


@dataclass
class AutoscalerStatus:
    groups: list[GroupStatus] = field(default_factory=list)
    unmet: dict[str, str] = field(default_factory=dict)  # job id -> why no group will take it
    pending_jobs: int = 0
