"""How long a task workflow waits before an attempt lost to a heartbeat timeout may run elsewhere (pure).

The argument, in full in docs/reliability.md ("Leases"): the agent renews an attempt's lease only
with a heartbeat the server recorded, to (when that heartbeat was sent) + `lease`, and its watchdog
kills the attempt when the host's clock passes that. The server timed the attempt out
`heartbeat_timeout` after the last heartbeat it recorded, so at most `lease - heartbeat_timeout` of
the lease can be left then; `margin` covers the rates of the two clocks and the watchdog's tick.
All of it is durations, each measured by one clock: no wall clocks of two hosts are compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from activities.contracts import LEASE_KEY, LEASE_MARGIN_KEY

__all__ = ["fence_seconds"]

MAX_FENCE_SECONDS = 3600.0  # a lease claimed longer than this is clamped: a bad agent must not park a task


def fence_seconds(details: Sequence[Any], heartbeat_timeout: float) -> float | None:
    """Seconds to wait after the heartbeat timeout, from the attempt's last recorded heartbeat details.

    None when the attempt held no lease (no heartbeat recorded, or an agent whose runtime does not
    fence its tasks): nothing to wait for. Otherwise `lease + margin - heartbeat_timeout`, at least 0.
    """
    for detail in details:
        if isinstance(detail, dict) and LEASE_KEY in detail:
            try:
                lease = float(detail[LEASE_KEY])
                margin = float(detail.get(LEASE_MARGIN_KEY, 0.0))
            except (TypeError, ValueError):
                return None
            if not (lease >= 0 and margin >= 0):
                return None
            return round(min(max(0.0, lease + margin - heartbeat_timeout), MAX_FENCE_SECONDS), 3)
    return None
