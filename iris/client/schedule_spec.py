"""A schedule's options, its status and its blocking handle: a leaf, importing no Temporal SDK (a team-mode
`iris schedule` command loads none; iris/client/schedule_calls.py picks Temporal's side or the Iris API's)."""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

OVERLAP_NAMES = ("skip", "buffer_one", "allow_all", "cancel_other")
"""A firing while the last job runs (Temporal's overlap policies, iris/client/schedules.py `OVERLAPS`)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class ScheduleStatus:
    """One schedule: its cron and time zone as given, whether paused, its next 3 firings, its latest jobs."""

    name: str
    cron: str
    timezone: str
    paused: bool
    next_runs: tuple[datetime, ...]
    recent_jobs: tuple[str, ...]  # ids of the jobs it started most recently, oldest first
    overlap: str = "skip"
    user: str = ""


def check_schedule(name: Any, cron: Any, timezone: Any, overlap: Any) -> None:
    """ValueError naming the field of a bad schedule option (the cron itself is Temporal's to parse)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name must be 1-100 letters, digits, '.', '_' or '-' (it starts each job's id), got {name!r}")
    if not isinstance(cron, str) or not cron.strip():
        raise ValueError(f"cron must be a cron expression such as '0 3 * * *', got {cron!r}")
    if not isinstance(timezone, str):
        raise ValueError(f"timezone must be an IANA time zone name such as 'UTC', got {timezone!r}")
    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"timezone: unknown time zone {timezone!r}") from None
    if overlap not in OVERLAP_NAMES:
        raise ValueError(f"overlap must be one of {', '.join(OVERLAP_NAMES)}, got {overlap!r}")


class ScheduleCalls(Protocol):
    """One schedule's calls: Temporal's (`schedules.AsyncSchedule`) or the Iris API's (`remote.RemoteSchedule`)."""

    name: str

    async def status(self) -> ScheduleStatus: ...
    async def pause(self, note: str = "paused") -> None: ...
    async def unpause(self, note: str = "unpaused") -> None: ...
    async def trigger(self) -> None: ...
    async def delete(self) -> None: ...
    async def job_ids(self) -> list[str]: ...


class ScheduleRef:
    """The blocking handle `IrisClient.schedule(name)` returns (see AsyncSchedule); `.jobs()` gives job handles."""

    def __init__(self, inner: ScheduleCalls, run: Callable[[Coroutine[Any, Any, Any]], Any],
                 job: Callable[[str], Any]) -> None:  # fmt: skip
        self._inner, self._run, self._job = inner, run, job
        self.name = inner.name

    def __repr__(self) -> str:
        return f"Schedule({self.name!r})"

    def status(self) -> ScheduleStatus:
        return self._run(self._inner.status())  # type: ignore[no-any-return]

    def pause(self, note: str = "paused") -> None:
        self._run(self._inner.pause(note))

    def unpause(self, note: str = "unpaused") -> None:
        self._run(self._inner.unpause(note))

    def trigger(self) -> None:
        """Submit one job now."""
        self._run(self._inner.trigger())

    def delete(self) -> None:
        """Delete the schedule (its jobs run on)."""
        self._run(self._inner.delete())

    def jobs(self) -> list[Any]:
        """A handle (as `submit` returns) for each job the schedule started, oldest first."""
        return [self._job(job_id) for job_id in self._run(self._inner.job_ids())]
