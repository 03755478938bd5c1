"""The scheduler's placements, kept as protobuf columns, with what they add up to kept as they change.

100,000s of placements as Python objects cost a run ~0.5 s to build from its carry and the garbage
collector a scan of each in every full collection. Here a job's placements are columns of a message
(`pb.PlacedJob`: per shape, the task indices, attempts, worker numbers and placement times), which a run
parses and serializes in milliseconds and the collector does not see; a `Placement` is read from one when
asked for. Beside them, kept as placements come and go (never recounted: reading every placement costs
~0.1-1 us each): per worker the cpu, memory, gpus and tpus committed, and per user the running tasks (the
published user table). They travel with the placements (`carried`, `from_carried`). A pass's snapshot copies the
columns as they are (`running_columns`).

A task's place is keyed by its task workflow id, `task_workflow_id(job_id, task_index)`. Where a task sits
in its job's columns is indexed per job the first time one of its places is looked up by key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from itertools import count, repeat
from typing import Any

from google.protobuf.message import DecodeError

from activities.contracts import task_workflow_id
from activities.proto import cluster_pb2 as pb
from workflows.scheduler.job_columns import JobColumns
from workflows.scheduler.placement_views import NO_PORTS, JobPlacements, JobsView, Placement, split_key

Shape = tuple[int, int, int, int, str, str, bool]  # a run's: cpu_millis, memory_bytes, gpus, tpus, user, band, gang
COMPACT_AT = 1_000  # worker names no placement refers to, beyond which a carry renumbers the workers


def _columns(run: pb.PlacedRun) -> tuple[Any, Any, Any, Any]:
    return run.task_indices, run.attempts, run.workers, run.placed_at


class Placements(MutableMapping[str, Placement]):
    """Placements by task workflow id; `used` per worker and `users` follow every change."""

    def __init__(self, items: Mapping[str, Placement] | Iterable[tuple[str, Placement]] = ()) -> None:
        self._store = pb.PlacedState()  # its `jobs` map holds the columns
        self._jobs = JobColumns(self._store)  # job id -> its columns in the store, in the order first placed
        self._where: dict[str, dict[int, tuple[int, int]]] = {}  # job id -> task index -> (run, position), as read
        self._ports: dict[str, Mapping[str, int]] = {}  # task workflow id -> the ports it holds (those holding any)
        self.names: list[str] = []  # the workers the columns refer to by number (only appended to, but by `carried`)
        self._number: dict[str, int] = {}
        self._len = 0
        self.used: dict[str, list[int]] = {}  # worker id -> [cpu_millis, memory_bytes, gpus, tpus] committed
        self._count: dict[str, int] = {}  # worker id -> its placements (an idle worker has no `used` row)
        self.users: dict[str, int] = {}  # user -> placements (the published user table's running tasks)
        self.update(dict(items))

    # -- carried ---------------------------------------------------------------------------------------

    def carried(self) -> bytes:
        """The placements and what they add up to, serialized (the run's carry holds it whole)."""
        if len(self.names) > len(self.used) + COMPACT_AT:
            self._renumber()
        store, used = self._store, self.used
        store.job_ids[:] = list(self._jobs)
        store.worker_names[:] = self.names
        store.tasks = self._len
        store.used_workers[:] = list(used)
        for i, column in enumerate((store.used_cpu_millis, store.used_memory_bytes, store.used_gpus, store.used_tpus)):
            column[:] = [u[i] for u in used.values()]
        store.used_tasks[:] = list(self._count.values())
        store.users[:] = list(self.users)
        store.user_tasks[:] = list(self.users.values())
        store.ports.clear()
        for key, ports in self._ports.items():
            store.ports[key].ports.update(ports)
        try:
            return store.SerializeToString()
        finally:  # the store holds the jobs only: the rest is kept in Python while the run goes on
            self._clear_carried(store)

    def running_columns(self) -> bytes:
        """The jobs' placement columns and their order, serialized (a pass's snapshot: `ShareInput.placed`).
        One copy in C, however many tasks run: the snapshot reads the columns as they are kept."""
        store = self._store
        store.job_ids[:] = list(self._jobs)
        try:
            return store.SerializeToString()
        finally:
            store.ClearField("job_ids")

    @staticmethod
    def _clear_carried(store: pb.PlacedState) -> None:
        for name in ("job_ids", "worker_names", "tasks", "used_workers", "used_cpu_millis", "used_memory_bytes",
                     "used_gpus", "used_tpus", "used_tasks", "users", "user_tasks", "ports"):  # fmt: skip
            store.ClearField(name)

    @classmethod
    def from_carried(cls, data: bytes) -> Placements:
        """The placements `carried` wrote."""
        self = cls()
        try:
            store = self._store = pb.PlacedState.FromString(data)
        except DecodeError as e:
            raise ValueError(f"the carried placements do not parse as a PlacedState: {e}") from e
        self._jobs = JobColumns(store, store.job_ids)
        if len(self._jobs) != len(store.jobs) or store.tasks != sum(store.used_tasks):
            raise ValueError(f"the carried placements do not add up: {len(store.job_ids)} job ids for "
                             f"{len(store.jobs)} jobs, {store.tasks} placements for {sum(store.used_tasks)} "
                             "on workers")  # fmt: skip
        self.names = list(store.worker_names)
        self._number = dict(zip(self.names, count()))
        self._len = store.tasks
        totals = zip(store.used_cpu_millis, store.used_memory_bytes, store.used_gpus, store.used_tpus, strict=True)
        self.used = dict(zip(store.used_workers, map(list, totals), strict=True))
        self._count = dict(zip(store.used_workers, store.used_tasks, strict=True))
        self.users = dict(zip(store.users, store.user_tasks, strict=True))
        self._ports = {key: dict(held.ports) for key, held in sorted(store.ports.items())}
        self._clear_carried(store)
        return self

    def _renumber(self) -> None:
        """Number only the workers some placement is on (a run's forgotten workers are not carried on)."""
        names = list(self.used)
        number = dict(zip(names, count()))
        remap = [number.get(name, -1) for name in self.names]
        for job in self._jobs.values():
            for run in job.runs:
                run.workers[:] = [remap[w] for w in run.workers]
        self.names, self._number = names, number

    # -- reading ---------------------------------------------------------------------------------------

    def read(self, job_id: str, run: pb.PlacedRun, pos: int) -> Placement:
        index = run.task_indices[pos]
        ports = self._ports.get(task_workflow_id(job_id, index), NO_PORTS) if self._ports else NO_PORTS
        return Placement(job_id, index, run.attempts[pos], self.names[run.workers[pos]], run.cpu_millis,
                         run.memory_bytes, run.gpus, run.tpus, ports, run.user, run.band, run.gang,
                         run.placed_at[pos])  # fmt: skip

    def _locate(self, job_id: str, index: int) -> tuple[pb.PlacedJob, int, int] | None:
        """The job, run and position holding this task's place, or None."""
        job = self._jobs.get(job_id)
        if job is None:
            return None
        where = self._where.get(job_id)
        if where is None:
            where = self._where[job_id] = {}
            for r, run in enumerate(job.runs):
                where.update(zip(run.task_indices, zip(repeat(r), count()), strict=False))
        at = where.get(index)
        return None if at is None else (job, at[0], at[1])

    def placed_attempt(self, job_id: str, index: int) -> int:
        """The attempt holding this task's place, -1 when none does (no key built, no `Placement` read)."""
        at = self._locate(job_id, index)
        return -1 if at is None else at[0].runs[at[1]].attempts[at[2]]

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[str]:
        for job_id, job in list(self._jobs.items()):
            yield from JobPlacements(self, job_id, job)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        try:
            return self._locate(*split_key(key)) is not None
        except KeyError:
            return False

    def __getitem__(self, key: str) -> Placement:
        job_id, index = split_key(key)
        at = self._locate(job_id, index)
        if at is None:
            raise KeyError(key)
        job, r, pos = at
        return self.read(job_id, job.runs[r], pos)

    def get(self, key: str, default: Any = None) -> Any:  # one lookup, not `in` then `[]`
        try:
            return self[key]
        except KeyError:
            return default

    def items(self) -> Iterator[tuple[str, Placement]]:  # type: ignore[override]
        """Every placement, job by job (~1 us each: for rare reads, not a pass)."""
        for job_id, job in list(self._jobs.items()):
            yield from JobPlacements(self, job_id, job).items()

    def values(self) -> Iterator[Placement]:  # type: ignore[override]
        return (p for _, p in self.items())

    def on_workers(self, worker_ids: Iterable[str]) -> list[Placement]:
        """The placements on these workers, in job and task order (columns read, a placement built only for those)."""
        wanted = {self._number[w] for w in worker_ids if w in self.used}
        found: list[Placement] = []
        if not wanted:
            return found
        for job_id, job in self._jobs.items():
            for run in job.runs:
                for pos, w in enumerate(run.workers):
                    if w in wanted:
                        found.append(self.read(job_id, run, pos))
        found.sort(key=lambda p: (p.job_id, p.task_index))
        return found

    def holding_ports(self) -> list[str]:
        """The task workflow ids of the placements that hold ports."""
        return list(self._ports)

    def shapes(self) -> Iterator[tuple[pb.PlacedRun, int]]:
        """Every job's runs (a run: user, request, band) with how many placements each holds."""
        return ((run, len(run.task_indices)) for job in self._jobs.values() for run in job.runs)

    def count_on(self, worker_id: str) -> int:
        """How many placements this worker holds."""
        return self._count.get(worker_id, 0)

    def columns(self, job_id: str) -> pb.PlacedJob | None:
        """The job's placement columns as kept (read only: the snapshot copies them whole), or None."""
        return self._jobs.get(job_id)

    @property
    def jobs(self) -> JobsView:
        """Job id -> its placements by task workflow id."""
        return JobsView(self, self._jobs)

    def of_job(self, job_id: str) -> Iterator[Placement]:
        """The job's placements (none: empty)."""
        job = self._jobs.get(job_id)
        return JobPlacements(self, job_id, job).values() if job is not None else iter(())

    def placed(self, job_id: str) -> int:
        """How many of the job's tasks hold a place."""
        job = self._jobs.get(job_id)
        return sum(len(run.task_indices) for run in job.runs) if job is not None else 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle rebuild the index from the items
        return (type(self), (dict(self.items()),))

    def copy(self) -> dict[str, Placement]:
        """A plain dict of the placements."""
        return dict(self.items())

    # -- changing --------------------------------------------------------------------------------------

    def __setitem__(self, key: str, p: Placement) -> None:
        if key != task_workflow_id(p.job_id, p.task_index):
            raise ValueError(f"placement of {p.job_id!r} task {p.task_index} stored under {key!r}")
        shape = (p.cpu_millis, p.memory_bytes, p.gpus, p.tpus, p.user, p.band, p.gang)
        self.place_job(p.job_id, shape, [(p.task_index, p.attempt, p.worker_id)], p.placed_at,
                       {p.task_index: p.ports} if p.ports else None)  # fmt: skip

    def place_job(
        self, job_id: str, shape: Shape, places: Sequence[tuple[int, int, str]], placed_at: float,
        ports: Mapping[int, Mapping[str, int]] | None = None,
    ) -> None:  # fmt: skip
        """Place tasks of one job and one shape: (task index, attempt, worker id) each, all placed at `placed_at`.

        One step for a job's placements (a pass commits thousands): its run is found once and its columns
        extended, where placing them one by one cost a `Placement` built and taken apart per task. A task that
        already holds a place gives it up for the new one."""
        if job_id in self._jobs:
            for index, _, _ in places:
                if self._locate(job_id, index) is not None:
                    self._remove(task_workflow_id(job_id, index), job_id, index)
        job = self._jobs.get(job_id)
        if job is None:
            job = self._jobs.add(job_id)
            self._where[job_id] = {}
        shapes = [(run.cpu_millis, run.memory_bytes, run.gpus, run.tpus, run.user, run.band, run.gang)
                  for run in job.runs]  # fmt: skip
        if shape in shapes:
            r = shapes.index(shape)
            run = job.runs[r]
        else:
            cpu_millis, memory_bytes, gpus, tpus, user, band, gang = shape
            r, run = len(job.runs), job.runs.add(cpu_millis=cpu_millis, memory_bytes=memory_bytes, gpus=gpus,
                                                 tpus=tpus, user=user, band=band, gang=gang)  # fmt: skip
        indices = [index for index, _, _ in places]
        where = self._where.get(job_id)
        if where is not None:  # else built whole when next read
            where.update(zip(indices, zip(repeat(r), count(len(run.task_indices))), strict=False))
        numbers, names, number_of = [], self.names, self._number
        for _, _, worker_id in places:
            number = number_of.get(worker_id)
            if number is None:
                number = number_of[worker_id] = len(names)
                names.append(worker_id)
            numbers.append(number)
        run.task_indices.extend(indices)
        run.attempts.extend([attempt for _, attempt, _ in places])
        run.workers.extend(numbers)
        run.placed_at.extend([placed_at] * len(places))
        for index, held in (ports or {}).items():
            if held:
                self._ports[task_workflow_id(job_id, index)] = dict(held)
        self._len += len(places)
        for _, _, worker_id in places:
            self._index(worker_id, run, +1)

    def __delitem__(self, key: str) -> None:
        job_id, index = split_key(key)
        if self._locate(job_id, index) is None:
            raise KeyError(key)
        self._remove(key, job_id, index)

    def release(self, key: str, attempt: int) -> Placement | None:
        """Remove the task's place if this attempt holds it, and return it (a release: one lookup, not three)."""
        job_id, index = split_key(key)
        at = self._locate(job_id, index)
        if at is None or at[0].runs[at[1]].attempts[at[2]] != attempt:
            return None
        placement = self.read(job_id, at[0].runs[at[1]], at[2])
        self._remove(key, job_id, index, at)
        return placement

    def _remove(self, key: str, job_id: str, index: int, at: tuple[pb.PlacedJob, int, int] | None = None) -> None:
        """Take the task's place out of its run: the run's last place moves into its position."""
        job, r, pos = at or self._locate(job_id, index)  # type: ignore[misc]
        run = job.runs[r]
        self._index(self.names[run.workers[pos]], run, -1)
        where = self._where[job_id]
        del where[index]
        last = len(run.task_indices) - 1
        columns = _columns(run)
        if pos != last:
            for column in columns:
                column[pos] = column[last]
            where[run.task_indices[pos]] = (r, pos)
        for column in columns:
            del column[last]
        self._ports.pop(key, None)
        self._len -= 1
        if not run.task_indices:
            del job.runs[r]
            if job.runs:
                del self._where[job_id]  # later runs moved up: indexed again when next read
            else:
                self._jobs.remove(job_id)
                del self._where[job_id]

    def pop(self, key: str, *default: Any) -> Any:
        p = self.get(key)
        if p is None:
            if default:
                return default[0]
            raise KeyError(key)
        del self[key]
        return p

    def clear(self) -> None:
        self._store = pb.PlacedState()
        self._jobs = JobColumns(self._store)
        self._where.clear()
        self._ports.clear()
        self._len = 0
        self.used.clear()
        self._count.clear()
        self.users.clear()

    # -- the index ------------------------------------------------------------------------------------

    def _index(self, w: str, run: pb.PlacedRun, sign: int) -> None:
        """Add (+1) or take away (-1) one place of `run`'s shape on worker `w`."""
        n = self._count.get(w, 0) + sign
        if n:
            u = self.used.get(w)
            if u is None:
                u = self.used[w] = [0, 0, 0, 0]
            u[0] += sign * run.cpu_millis
            u[1] += sign * run.memory_bytes
            u[2] += sign * run.gpus
            u[3] += sign * run.tpus
            self._count[w] = n
        else:
            del self.used[w], self._count[w]
        n = self.users.get(run.user, 0) + sign
        if n:
            self.users[run.user] = n
        else:
            del self.users[run.user]


__all__ = ["NO_PORTS", "JobPlacements", "JobsView", "Placement", "Placements", "Shape"]
