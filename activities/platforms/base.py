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
from typing import Protocol

from activities.contracts.fleet import ControlPlaneAddress, ScaleGroupSpec, SliceInfo


class QuotaExhausted(Exception):  # noqa: N818 - named after the ApplicationError type it becomes
    """The platform refused to create a slice for quota, stockout or capacity reasons."""


class PlatformRefused(Exception):  # noqa: N818 - named after the ApplicationError type it becomes
    """The platform refused the request as made (forbidden, invalid argument, unknown type): retrying it
    unchanged cannot succeed, only a change of config or permissions can."""


class SliceFailed(Exception):  # noqa: N818 - named after the ApplicationError type it becomes
    """The platform failed this slice (and has cleaned up whatever it had created for it)."""


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


