"""The scheduler workflow's reservations: what it holds for whom, and the book its commit checks against.

Pure functions of the scheduler's state (no Temporal calls), like scheduler_state. A reservation
is held for its job's tree (jobs whose id starts with the job's id and "/") until the job ends
(RELEASE_RESERVATION). Each entry is one worker's worth of capacity, held on one worker; an entry
whose worker is lost goes back to `lost` and is held again elsewhere when capacity allows.

The commit re-checks every placement and every new hold against the state as it is then (`Book`):
on each worker, work outside any reservation's tree plus, per reservation, the larger of what it
holds there and what its tree runs there, never passes the worker's capacity; a tree's task is
only accepted where its reservation has room left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from activities.proto import cluster_pb2 as pb
from activities.proto.values import set_constraint
from scheduler.reservations import tree_root
from workflows.messages import ConstraintSpec, Reserve
from workflows.scheduler.placement_index import Placements

MAX_PUBLISHED = 100  # reservations listed in the scheduler's memo (each upsert is an event holding it all)
MAX_WORKERS_LISTED = 32  # workers listed per reservation in the memo


@dataclass
class HeldReservation:
    reservation_id: str
    job_id: str
    user: str
    entries: list[list[int]]  # [cpu_millis, memory_bytes, gpus, tpus] per entry
    constraints: list[ConstraintSpec]
    tolerations: list[str]
    requested_at: float  # workflow time: waiting reservations are held oldest first
    held: dict[int, str] = field(default_factory=dict)  # entry -> worker holding it
    lost: dict[int, str] = field(default_factory=dict)  # entry -> the lost worker it waits to replace
    reason: str = ""  # why an entry still waits ("" once every entry is held)
    held_at: float = 0.0  # workflow time it was first held whole


def from_request(reserve: Reserve, reservation_id: str, now: float) -> HeldReservation:
    return HeldReservation(
        reservation_id, reserve.job_id, reserve.user, [list(e) for e in reserve.entries],
        list(reserve.constraints), list(reserve.tolerations), now,
    )  # fmt: skip


def _vec(values: list[int]) -> pb.Resources:
    return pb.Resources(cpu_millis=values[0], memory_bytes=values[1], gpus=values[2], tpus=values[3])


class StateView(Protocol):
    """What of the scheduler's state (workflows.scheduler.scheduler_state, which holds the reservations) this
    module reads."""

    @property
    def reservations(self) -> Mapping[str, HeldReservation]: ...
    @property
    def placements(self) -> Placements: ...
    @property
    def workers(self) -> Mapping[str, Any]: ...


class Book:
    """Per worker, what is booked: outside work, and per reservation what it holds and its tree uses."""

    def __init__(self, state: StateView) -> None:
        self.roots = {r.job_id: r for r in state.reservations.values()}
        self.outside: dict[str, list[int]] = {}
        self.held: dict[tuple[str, str], list[int]] = {}
        self.used: dict[tuple[str, str], list[int]] = {}
        self.on_worker: dict[str, set[str]] = {}  # worker -> roots with a hold or tree use there
        for r in self.roots.values():
            for index, worker_id in r.held.items():
                _add(self.held.setdefault((r.job_id, worker_id), [0, 0, 0, 0]), r.entries[index])
                self.on_worker.setdefault(worker_id, set()).add(r.job_id)
        # All the work placed (the placements keep it per worker), less the trees' own, read per job: a
        # walk over the trees' placements, not over every placement.
        placements = state.placements
        self.outside = {w: list(u) for w, u in placements.used.items()}
        for job_id, tasks in placements.jobs.items():
            root = self.root_of(job_id)
            if root is None:
                continue
            for p in tasks.values():
                need = [p.cpu_millis, p.memory_bytes, p.gpus, p.tpus]
                _add(self.outside[p.worker_id], [-n for n in need])
                _add(self.used.setdefault((root, p.worker_id), [0, 0, 0, 0]), need)
                self.on_worker.setdefault(p.worker_id, set()).add(root)

    def root_of(self, job_id: str) -> str | None:
        """The reserving job whose tree holds `job_id` (the innermost), or None."""
        return tree_root(job_id, self.roots) if self.roots and "/" in job_id else None

    def reservation_of(self, job_id: str) -> str:
        """The reservation id a job's tasks see (IRIS_RESERVATION_ID): its tree's, or its own; "" for none."""
        root = job_id if job_id in self.roots else self.root_of(job_id)
        return self.roots[root].reservation_id if root is not None else ""

    def booked(self, worker_id: str) -> list[int]:
        total = list(self.outside.get(worker_id, (0, 0, 0, 0)))
        for root in self.on_worker.get(worker_id, ()):
            held = self.held.get((root, worker_id), (0, 0, 0, 0))
            used = self.used.get((root, worker_id), (0, 0, 0, 0))
            for i in range(4):
                total[i] += max(held[i], used[i])
        return total

    def place(self, job_id: str, worker_id: str, need: list[int] | tuple[int, ...], capacity: tuple[int, ...]) -> bool:
        """Book one task if it fits (a tree's task: in its reservation's room on that worker); whether it did."""
        root = self.root_of(job_id)
        if root is None:
            booked = self.booked(worker_id)
            if any(booked[i] + need[i] > capacity[i] for i in range(4)):
                return False
            _add(self.outside.setdefault(worker_id, [0, 0, 0, 0]), need)
            return True
        held = self.held.get((root, worker_id), (0, 0, 0, 0))
        used = self.used.setdefault((root, worker_id), [0, 0, 0, 0])
        if any(used[i] + need[i] > held[i] for i in range(4)):
            return False
        _add(used, need)
        self.on_worker.setdefault(worker_id, set()).add(root)
        return True

    def hold(self, root: str, worker_id: str, entry: list[int], capacity: tuple[int, ...]) -> bool:
        """Book one more entry of a reservation on a worker if the worker has room; whether it did."""
        booked = self.booked(worker_id)
        held = self.held.get((root, worker_id), [0, 0, 0, 0])
        used = self.used.get((root, worker_id), (0, 0, 0, 0))
        grown = [held[i] + entry[i] for i in range(4)]
        extra = [max(grown[i], used[i]) - max(held[i], used[i]) for i in range(4)]
        if any(booked[i] + extra[i] > capacity[i] for i in range(4)):
            return False
        self.held[(root, worker_id)] = grown
        self.on_worker.setdefault(worker_id, set()).add(root)
        return True

    def copy(self) -> Book:
        """A trial copy (a gang is committed whole or not at all)."""
        other = object.__new__(Book)
        other.roots = self.roots
        other.outside = {w: list(u) for w, u in self.outside.items()}
        other.held = {k: list(u) for k, u in self.held.items()}
        other.used = {k: list(u) for k, u in self.used.items()}
        other.on_worker = {w: set(r) for w, r in self.on_worker.items()}
        return other


def _add(total: list[int], more: list[int] | tuple[int, ...]) -> None:
    for i in range(4):
        total[i] += more[i]


def encode(snap: pb.SchedulingSnapshot, state: StateView, now: float) -> None:
    """Add the reservations to the scheduling snapshot, with what each tree's running tasks use per worker."""
    if not state.reservations:
        return
    book = Book(state)
    for r in state.reservations.values():
        sr = snap.reservations.add(
            reservation_id=r.reservation_id, job_id=r.job_id, tolerations=r.tolerations,
            waited_seconds=max(0.0, now - r.requested_at), held_once=bool(r.held_at),
        )  # fmt: skip
        for entry in r.entries:
            sr.entries.append(_vec(entry))
        for c in r.constraints:
            set_constraint(sr.constraints.add(), c.key, c.op, c.value, c.soft)
        for index, worker_id in r.held.items():
            sr.held.add(entry=index, worker_id=worker_id)
        for (root, worker_id), used in book.used.items():
            if root == r.job_id and worker_id in r.held.values():
                sr.used[worker_id].CopyFrom(_vec(used))


def apply_holds(state: StateView, plan: pb.SchedulingPlan, now: float) -> bool:
    """Take the plan's new holds (and reasons) that still fit the state now; whether anything changed.

    A first hold is taken whole or not at all; a replacement entry alone.
    """
    changed = False
    for rid, reason in plan.reservation_reasons.items():
        r = state.reservations.get(rid)
        if r is not None and r.reason != reason:
            r.reason, changed = reason, True
    if not plan.reservation_holds:
        return changed
    book = Book(state)
    by_reservation: dict[str, list[pb.ReservationHold]] = {}
    for h in plan.reservation_holds:
        by_reservation.setdefault(h.reservation_id, []).append(h)
    for rid, holds in by_reservation.items():
        r = state.reservations.get(rid)
        if r is None:
            continue  # released while the pass ran
        whole = not r.held_at  # held once: each lost entry is replaced on its own
        trial = book.copy() if whole else book
        taken = []
        for h in holds:
            worker = state.workers.get(h.worker_id)
            ok = (
                h.entry not in r.held and 0 <= h.entry < len(r.entries) and worker is not None
                and worker.healthy and not worker.cordoned
                and trial.hold(r.job_id, h.worker_id, r.entries[h.entry],
                               (worker.cpu_millis, worker.memory_bytes, worker.gpus, worker.tpus))
            )  # fmt: skip
            if ok:
                taken.append(h)
            elif whole:
                taken = []
                break
        if whole and taken:
            book = trial
        for h in taken:
            r.held[h.entry] = h.worker_id
            r.lost.pop(h.entry, None)
            changed = True
        if whole and taken:
            r.held_at = now
        if len(r.held) == len(r.entries):
            r.reason = ""
    return changed


def lose_workers(state: StateView, worker_ids: set[str]) -> bool:
    """Entries held on these (lost or removed) workers wait for a replacement; whether any did."""
    changed = False
    for r in state.reservations.values():
        for index, worker_id in list(r.held.items()):
            if worker_id in worker_ids:
                del r.held[index]
                r.lost[index] = worker_id
                changed = True
    return changed


def view(state: StateView) -> list[dict[str, Any]]:
    """The reservations as the scheduler publishes them in its memo (`iris reservation list`)."""
    if not state.reservations:
        return []
    book = Book(state)
    out = []
    for r in list(state.reservations.values())[:MAX_PUBLISHED]:
        workers = []
        for worker_id in sorted(set(r.held.values()))[:MAX_WORKERS_LISTED]:
            workers.append({
                "worker": worker_id,
                "held": book.held.get((r.job_id, worker_id), [0, 0, 0, 0]),
                "used": book.used.get((r.job_id, worker_id), [0, 0, 0, 0]),
            })  # fmt: skip
        out.append({
            "id": r.reservation_id, "job": r.job_id, "user": r.user, "entries": r.entries,
            "held": len(r.held), "workers": workers,
            "lost": [{"entry": i, "worker": w} for i, w in sorted(r.lost.items())],
            "state": "HELD" if r.held_at else "WAITING", "reason": r.reason, "held_at": r.held_at,
        })  # fmt: skip
    return out
