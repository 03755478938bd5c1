"""Capped exponential backoff with jitter, for calls that must be retried until they succeed.

An agent never gives up on the control plane: every failure to reach Temporal or the
scheduler is retried after `Backoff.next()` seconds. The jitter spreads a fleet's
retries so that 10,000 agents cut off together do not reconnect in one burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delays of `first`, twice that, ... up to `cap` seconds, each between half and all of its step."""

    first: float = 0.2
    cap: float = 5.0
    attempts: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.cap:
            raise ValueError(f"first: must be > 0 and <= cap ({self.cap}), got {self.first}")

    def next(self) -> float:
        """The pause before the next attempt (and count this one)."""
        step = min(self.cap, self.first * 2 ** min(self.attempts, 32))
        self.attempts += 1
        return step / 2 + random.uniform(0, step / 2)

    def reset(self) -> None:
        """Start from `first` again (after a success)."""
        self.attempts = 0


async def pause(seconds: float, stop: asyncio.Event | None) -> bool:
    """Sleep `seconds`, ending early when `stop` is set; whether `stop` is set."""
    if stop is None:
        await asyncio.sleep(seconds)
        return False
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
