"""The scheduler's placements, with what they add up to kept up to date as they change.

A pass used to add up all placements (100,000 at scale) to learn what each worker has committed, and
walk them all again to list running work by job for sharing's part of the snapshot. `Placements` is the
same mapping (task workflow id -> placement) that keeps both as placements come and go: per worker the
cpu, memory, gpus and tpus committed, per job its placements and a stamp that changes with them (what
the snapshot's cached pieces are keyed by, workflows/scheduler/snapshot_cache.py), and per user the running
tasks (the published user table).

Nothing here is carried: it is rebuilt as a run loads its placements. A placement is replaced, never
changed in place (the packer relies on that too), so the index stays exact. While a run packs its state
over several workflow tasks, the keys set or removed are also logged (`track`), so the packer adds what
changed meanwhile without comparing every placement with its frozen copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

NO_PORTS: Mapping[str, int] = {}  # shared by the placements that hold none: never changed (read-only by type)


def _no_ports() -> Mapping[str, int]:
    return NO_PORTS


@dataclass
class Placement:
    """One task attempt's place. A placement is replaced, never changed (the packer and the index rely on it)."""

    job_id: str
    task_index: int
    attempt: int
    worker_id: str
    cpu_millis: int
    memory_bytes: int
    gpus: int
    tpus: int
    ports: Mapping[str, int] = field(default_factory=_no_ports)  # port name -> port held on its worker's host
    user: str = ""
    band: str = ""  # the band it was placed in (what preemption compares)
    gang: bool = False  # a coscheduled job's member: evicted with its whole gang
    placed_at: float = 0.0  # workflow time: the attempt is charged from here to its release


class Placements(dict[str, Placement]):
    """Placements by task workflow id; `used` per worker and `jobs` per job follow every change.

    Every way a dict changes goes through `__setitem__` or `_remove` (pop, del, clear, update,
    setdefault, popitem), so the index cannot drift from the mapping.
    """

    def __init__(self, items: Mapping[str, Placement] | Iterable[tuple[str, Placement]] = ()) -> None:
        super().__init__()
        self.used: dict[str, list[int]] = {}  # worker id -> [cpu_millis, memory_bytes, gpus, tpus] committed
        self._count: dict[str, int] = {}  # worker id -> its placements (an idle worker has no `used` row)
        self.jobs: dict[str, dict[str, Placement]] = {}  # job id -> its placements by task workflow id
        self.stamps: dict[str, int] = {}  # job id -> a number that changes whenever its placements do
        self.users: dict[str, int] = {}  # user -> placements (the published user table's running tasks)
        self._tick = 0
        # Keys set or removed since `track()` (a dict: an ordered set, in the same order on every replay), or None.
        self._log: dict[str, None] | None = None
        self.update(items)

    def track(self) -> None:
        """Log the keys set or removed from now on (a packer's frozen copy is taken at the same moment)."""
        self._log = {}

    def tracked(self) -> dict[str, None] | None:
        """The keys set or removed since `track()`, and stop logging; None when nothing was logging."""
        log, self._log = self._log, None
        return log

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle rebuild the index from the items
        return (type(self), (dict(self),))

    def __setitem__(self, key: str, placement: Placement) -> None:
        old = dict.get(self, key)
        if old is not None:
            self._unindex(key, old)
        dict.__setitem__(self, key, placement)
        self._index(key, placement)
        if self._log is not None:
            self._log[key] = None

    def load(self, placements: Iterable[tuple[str, Placement]]) -> None:
        """Set many placements (a run loading its carried state): as setting each, with less overhead."""
        contains, put = dict.__contains__, dict.__setitem__
        used, count, jobs, stamps, users = self.used, self._count, self.jobs, self.stamps, self.users
        log = self._log
        self._tick += 1
        tick = self._tick  # one stamp for all: each job's differs from any it had before
        for key, p in placements:
            if contains(self, key):  # replaced: the general way
                self[key] = p
                continue
            put(self, key, p)
            if log is not None:
                log[key] = None
            w = p.worker_id
            u = used.get(w)
            if u is None:
                used[w] = [p.cpu_millis, p.memory_bytes, p.gpus, p.tpus]
                count[w] = 1
            else:
                u[0] += p.cpu_millis
                u[1] += p.memory_bytes
                u[2] += p.gpus
                u[3] += p.tpus
                count[w] += 1
            job = jobs.get(p.job_id)
            if job is None:
                job = jobs[p.job_id] = {}
            job[key] = p
            stamps[p.job_id] = tick
            users[p.user] = users.get(p.user, 0) + 1
        self._tick += 1  # a later change gets a newer stamp than this load's, even when replaced above

    def _index(self, key: str, placement: Placement) -> None:
        w = placement.worker_id
        u = self.used.get(w)
        if u is None:
            self.used[w] = [placement.cpu_millis, placement.memory_bytes, placement.gpus, placement.tpus]
            self._count[w] = 1
        else:
            u[0] += placement.cpu_millis
            u[1] += placement.memory_bytes
            u[2] += placement.gpus
            u[3] += placement.tpus
            self._count[w] += 1
        job_id = placement.job_id
        job = self.jobs.get(job_id)
        if job is None:
            job = self.jobs[job_id] = {}
        job[key] = placement
        self._tick += 1
        self.stamps[job_id] = self._tick
        self.users[placement.user] = self.users.get(placement.user, 0) + 1

    def __delitem__(self, key: str) -> None:
        placement = dict.pop(self, key)
        self._unindex(key, placement)

    def pop(self, key: str, *default: Any) -> Any:
        if dict.__contains__(self, key):
            placement = dict.pop(self, key)
            self._unindex(key, placement)
            return placement
        if default:
            return default[0]
        raise KeyError(key)

    def popitem(self) -> tuple[str, Placement]:
        key, placement = dict.popitem(self)
        self._unindex(key, placement)
        return key, placement

    def clear(self) -> None:
        if self._log is not None:
            self._log.update(dict.fromkeys(self))
        dict.clear(self)
        self.used.clear()
        self._count.clear()
        self.jobs.clear()
        self.users.clear()
        self.stamps.clear()  # stamps only grow: a job placed again gets a newer one

    def setdefault(self, key: str, default: Any = None) -> Any:
        if not dict.__contains__(self, key):
            self[key] = default
        return dict.__getitem__(self, key)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for key, placement in dict(*args, **kwargs).items():
            self[key] = placement

    def __ior__(self, other: Any) -> Placements:  # type: ignore[override,misc]
        self.update(other)
        return self

    def copy(self) -> dict[str, Placement]:  # type: ignore[override]
        """A plain dict of the placements (a frozen view: the packer's)."""
        return dict(self)

    def of_job(self, job_id: str) -> Iterator[Placement]:
        """The job's placements (none: empty)."""
        return iter(self.jobs.get(job_id, {}).values())

    def _stamp(self, job_id: str) -> None:
        self._tick += 1
        self.stamps[job_id] = self._tick

    def _unindex(self, key: str, placement: Placement) -> None:
        if self._log is not None:
            self._log[key] = None
        w = placement.worker_id
        n = self._count[w] - 1
        if n:
            u = self.used[w]
            u[0] -= placement.cpu_millis
            u[1] -= placement.memory_bytes
            u[2] -= placement.gpus
            u[3] -= placement.tpus
            self._count[w] = n
        else:
            del self.used[w], self._count[w]
        n = self.users[placement.user] - 1
        if n:
            self.users[placement.user] = n
        else:
            del self.users[placement.user]
        job_id = placement.job_id
        job = self.jobs[job_id]
        del job[key]
        if job:
            self._stamp(job_id)
        else:
            del self.jobs[job_id], self.stamps[job_id]  # a job placed again later gets a newer stamp
