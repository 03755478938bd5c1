"""What the scheduler's placements read as: a `Placement` value, and one job's or every job's view of them.

The placements themselves are protobuf columns kept by placement_index (`Placements`, a `Columns`); these
are what a reader gets from them, built when asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from activities.contracts import task_workflow_id
from activities.proto import cluster_pb2 as pb

NO_PORTS: Mapping[str, int] = {}  # shared by the placements that hold none: never changed (read-only by type)


def _no_ports() -> Mapping[str, int]:
    return NO_PORTS


@dataclass
class Placement:
    """One task attempt's place: a value read from (or written to) the placements' columns."""

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


def split_key(key: str) -> tuple[str, int]:
    job_id, sep, index = key.rpartition("/task-")
    if not sep or not index.isdigit():
        raise KeyError(key)
    return job_id, int(index)


class Columns(Protocol):
    """What the views read of the placements (placement_index's `Placements`)."""

    def read(self, job_id: str, run: pb.PlacedRun, pos: int) -> Placement: ...
    def __getitem__(self, key: str) -> Placement: ...


class JobPlacements(Mapping[str, Placement]):
    """One job's placements by task workflow id, in task order (read from its columns as asked)."""

    __slots__ = ("_job", "_owner", "job_id")

    def __init__(self, owner: Columns, job_id: str, job: pb.PlacedJob) -> None:
        self._owner, self.job_id, self._job = owner, job_id, job

    def __len__(self) -> int:
        return sum(len(run.task_indices) for run in self._job.runs)

    def __iter__(self) -> Iterator[str]:
        return (task_workflow_id(self.job_id, index) for index, _, _ in self._sorted())

    def __getitem__(self, key: str) -> Placement:
        if split_key(key)[0] != self.job_id:
            raise KeyError(key)
        return self._owner[key]

    def _sorted(self) -> list[tuple[int, pb.PlacedRun, int]]:
        out = [(index, run, pos) for run in self._job.runs for pos, index in enumerate(run.task_indices)]
        out.sort(key=lambda t: t[0])
        return out

    def items(self) -> Iterator[tuple[str, Placement]]:  # type: ignore[override]
        read, job_id = self._owner.read, self.job_id
        for index, run, pos in self._sorted():
            yield task_workflow_id(job_id, index), read(job_id, run, pos)

    def values(self) -> Iterator[Placement]:  # type: ignore[override]
        return (p for _, p in self.items())


class JobsView(Mapping[str, JobPlacements]):
    """Placements job by job, in the order the jobs were first placed."""

    __slots__ = ("_jobs", "_owner")

    def __init__(self, owner: Columns, jobs: Mapping[str, pb.PlacedJob]) -> None:
        self._owner, self._jobs = owner, jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def __getitem__(self, job_id: str) -> JobPlacements:
        return JobPlacements(self._owner, job_id, self._jobs[job_id])

    def __eq__(self, other: object) -> bool:  # as the dict of dicts it stands for
        if not isinstance(other, Mapping):
            return NotImplemented
        return {j: dict(t.items()) for j, t in self.items()} == {j: dict(t) for j, t in other.items()}

    __hash__ = None  # type: ignore[assignment]


