"""Job id -> a job's placement columns in the placements' store (placement_index), made when first asked for."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from activities.proto import cluster_pb2 as pb


class JobColumns(Mapping[str, pb.PlacedJob]):
    """Job id -> its columns in the store, in the order the jobs were first placed.

    A job's message is made (a wrapper over the store's columns, kept from then on) the first time it is asked for:
    making all of a carry's at once cost a run's first task ~20 ms at 30,000 running jobs, where most tasks of a run
    read a few jobs.
    """

    __slots__ = ("_made", "_order", "_store")

    def __init__(self, store: pb.PlacedState, order: Iterable[str] = ()) -> None:
        self._store = store.jobs
        self._order = dict.fromkeys(order)
        self._made: dict[str, pb.PlacedJob] = {}

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._order

    def get(self, job_id: str, default: Any = None) -> Any:
        job = self._made.get(job_id)
        if job is None:
            if job_id not in self._order:  # not `self._store[job_id]`, which would add an empty job to the store
                return default
            job = self._made[job_id] = self._store[job_id]
        return job

    def __getitem__(self, job_id: str) -> pb.PlacedJob:
        job = self.get(job_id)
        if job is None:
            raise KeyError(job_id)
        return job

    def add(self, job_id: str) -> pb.PlacedJob:
        """A job placed for the first time: its empty columns, made in the store."""
        self._order[job_id] = None
        job = self._made[job_id] = self._store[job_id]
        return job

    def remove(self, job_id: str) -> None:
        """A job with no place left: out of the order and the store."""
        del self._order[job_id], self._store[job_id]
        self._made.pop(job_id, None)
