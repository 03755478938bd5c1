"""An agent's lease settings: a leaf module, so the CLI reads them without importing Temporal."""

from __future__ import annotations

from dataclasses import dataclass

from activities.contracts import (
    DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
    LEASE_KEY,
    LEASE_MARGIN_KEY,
    MAX_HEARTBEAT_TIMEOUT_SECONDS,
    MIN_HEARTBEAT_TIMEOUT_SECONDS,
)

__all__ = [
    "BEATS_PER_HEARTBEAT_TIMEOUT",
    "DEFAULT_HEARTBEAT_TIMEOUT_SECONDS",
    "DEFAULT_LEASE_MARGIN_SECONDS",
    "DEFAULT_LEASE_SECONDS",
    "MAX_LEASE_SECONDS",
    "RENEWALS_PER_LEASE",
    "LeaseSettings",
]

DEFAULT_LEASE_SECONDS = 10.0
DEFAULT_LEASE_MARGIN_SECONDS = 2.0
# A renewal must come several times per lease: one lost heartbeat must not cost a healthy task its life.
RENEWALS_PER_LEASE = 3
# Likewise per heartbeat timeout: the server loses an attempt only after ~3 beats in a row went missing.
BEATS_PER_HEARTBEAT_TIMEOUT = 3
MAX_LEASE_SECONDS = 1800.0  # the task workflow waits out at most an hour (workflows.tasks.fencing): lease + margin fit


@dataclass(frozen=True)
class LeaseSettings:
    """How long an attempt outlives its agent's last recorded heartbeat, and the margin replacements add.

    - ``seconds``: the lease; an attempt whose agent has not renewed it for this long is killed.
    - ``margin_seconds``: what the task workflow waits beyond the lease (clock rates, the watchdog's tick).
    - ``heartbeat_timeout``: how long Temporal lets an attempt go without a recorded heartbeat before
      it is lost (declared at registration; the task workflow sets it on the attempt's activity).
    - ``interval``: seconds between heartbeats (each renews); at most a third of the lease and of the
      heartbeat timeout.
    """

    seconds: float = DEFAULT_LEASE_SECONDS
    margin_seconds: float = DEFAULT_LEASE_MARGIN_SECONDS
    interval: float = 3.0
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        if not 0 < self.seconds <= MAX_LEASE_SECONDS:
            raise ValueError(f"lease: must be > 0 and at most {MAX_LEASE_SECONDS:g} seconds, got {self.seconds}")
        if not 0 <= self.margin_seconds <= MAX_LEASE_SECONDS:
            raise ValueError(f"lease margin: must be >= 0 and at most {MAX_LEASE_SECONDS:g} seconds, "
                             f"got {self.margin_seconds}")  # fmt: skip
        if not MIN_HEARTBEAT_TIMEOUT_SECONDS <= self.heartbeat_timeout <= MAX_HEARTBEAT_TIMEOUT_SECONDS:
            raise ValueError(f"heartbeat timeout (--heartbeat-timeout, IRIS_HEARTBEAT_TIMEOUT_SECONDS): must be "
                             f"at least {MIN_HEARTBEAT_TIMEOUT_SECONDS:g} and at most "
                             f"{MAX_HEARTBEAT_TIMEOUT_SECONDS:g} seconds, got {self.heartbeat_timeout}")  # fmt: skip
        if not self.interval > 0:
            raise ValueError(f"lease interval: must be > 0 seconds, got {self.interval}")
        interval = min(
            self.interval, self.seconds / RENEWALS_PER_LEASE, self.heartbeat_timeout / BEATS_PER_HEARTBEAT_TIMEOUT
        )
        object.__setattr__(self, "interval", interval)

    def detail(self) -> dict[str, float]:
        """What every heartbeat carries, so the task workflow waits for the lease this agent holds."""
        return {LEASE_KEY: self.seconds, LEASE_MARGIN_KEY: self.margin_seconds}
