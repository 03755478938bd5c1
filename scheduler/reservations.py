"""Reservations: capacity a job sets aside on concrete workers for its tree of descendant jobs.

A `Reservation` belongs to one job (its root); the job's tree is every job whose id
starts with the root's id and "/". Inside one pass:

1. **Set aside.** On every worker where a held reservation has capacity left (held
   minus what the tree's running tasks use there), that capacity leaves the pool the
   rest of the queue draws from, so nothing outside the tree is placed on it.
2. **Hold.** A reservation not held yet goes before the queue, oldest first, and is
   held whole or not at all: each entry (one `Resources`) on one worker where it
   fits, in the pass's best-fit order (entries may share a worker). One that cannot
   be held waits with a reason, as a job does. A held reservation whose worker was
   lost lists that entry as missing, and each missing entry is held again on its own
   as soon as some worker has room (replacement).
3. **Place inside.** A job of the tree is placed only on its reservation's workers,
   against the reservation's own capacity left (its tasks never use more than the
   reservation holds), and waits with a reason naming the reservation otherwise.
   The innermost reservation governs: reservations do not nest (a reservation
   requested by a job inside another one's tree waits with a reason saying so).
   The reserving job's own tasks are not in its tree: they are placed as usual.

A released reservation is simply absent from the pass's input: its capacity is back
in the pool in the same pass. Pure: no I/O, no clock; the caller commits `holds`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.attributes import describe as describe_constraint
from scheduler.attributes import evaluate_all, taint_constraints
from scheduler.placement import Feasibility, PassState, _emit, _member_order
from scheduler.preferences import rank as preference_rank
from scheduler.reasons import first_short_dimension, format_amount, join_counts, reservation_shortfall
from scheduler.types import TAINT_PREFIX, Constraint, PendingJob, Resources, WorkerSnapshot

_ZERO = Resources()
Explain = Callable[[PassState, Sequence[Constraint], Resources], str]


@dataclass(frozen=True, slots=True)
class Reservation:
    """One job's reservation as the pass sees it.

    `entries` are the amounts to hold, each on one worker. `held` maps an entry's
    index to the worker holding it (empty while the reservation waits; an entry
    whose worker was lost is left out and counts as missing). `used` is what the
    tree's running tasks take on each held worker (their placements). `waited_seconds`
    only orders reservations that wait (oldest first).
    """

    reservation_id: str
    job_id: str
    entries: tuple[Resources, ...]
    constraints: tuple[Constraint, ...] = ()
    tolerations: frozenset[str] = frozenset()
    held: Mapping[int, str] = field(default_factory=dict)
    used: Mapping[str, Resources] = field(default_factory=dict)
    waited_seconds: float = 0.0
    held_once: bool = False  # held whole before: entries lost since are replaced one by one

    def __post_init__(self) -> None:
        if not self.entries:
            raise ValueError(f"reservation {self.reservation_id}: needs at least one entry")
        for index in self.held:
            if not 0 <= index < len(self.entries):
                raise ValueError(f"reservation {self.reservation_id}: held entry {index} does not exist")

    @property
    def is_held(self) -> bool:
        """Held once (some entries may wait for a replacement); a reservation never held waits whole."""
        return self.held_once or bool(self.held)

    def missing(self) -> list[int]:
        """Entries not held on any worker (all of them while the reservation waits)."""
        return [index for index in range(len(self.entries)) if index not in self.held]

    def total(self) -> Resources:
        """Everything the reservation holds when whole: the most its tree may ever use."""
        out = _ZERO
        for entry in self.entries:
            out = out + entry
        return out


@dataclass(frozen=True, slots=True)
class ReservationPlan:
    """What a pass decided about reservations: entries newly held, and why others wait.

    `holds[reservation_id]` lists (entry index, worker id) held in this pass, both for a
    reservation held for the first time and for replacements of lost workers.
    `reasons` has a reason for every reservation with an entry still missing.
    """

    holds: Mapping[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)


def tree_root(job_id: str, roots: Mapping[str, object] | Sequence[str]) -> str | None:
    """The innermost job among `roots` whose tree holds `job_id` (its id starts with the root's and "/")."""
    end = job_id.rfind("/")
    while end > 0:
        prefix = job_id[:end]
        if prefix in roots:
            return prefix
        end = job_id.rfind("/", 0, end)
    return None


def governing(job_id: str, reservations: Mapping[str, Reservation]) -> Reservation | None:
    """The reservation a job's tasks are placed in (`reservations` keyed by their job id), or None."""
    if "/" not in job_id:
        return None
    root = tree_root(job_id, reservations)
    return None if root is None else reservations[root]


class _Pool:
    """One held reservation's capacity left in this pass, per worker row, and its workers in order."""

    __slots__ = ("cpu", "gpu", "mem", "reservation", "rows", "tpu")

    def __init__(self, reservation: Reservation) -> None:
        self.reservation = reservation
        self.rows: list[int] = []
        self.cpu: dict[int, int] = {}
        self.mem: dict[int, int] = {}
        self.gpu: dict[int, int] = {}
        self.tpu: dict[int, int] = {}

    def add(self, row: int, amount: Resources) -> None:
        if row not in self.cpu:
            self.rows.append(row)
            self.cpu[row] = self.mem[row] = self.gpu[row] = self.tpu[row] = 0
        self.cpu[row] += amount.cpu_millis
        self.mem[row] += amount.memory_bytes
        self.gpu[row] += amount.gpus
        self.tpu[row] += amount.tpus

    def fits(self, row: int, r: Resources) -> int:
        """How many tasks of request `r` fit in what the reservation has left on `row`."""
        take = 1 << 30
        for have, need in (
            (self.cpu[row], r.cpu_millis), (self.mem[row], r.memory_bytes), (self.gpu[row], r.gpus),
            (self.tpu[row], r.tpus),
        ):  # fmt: skip
            if need:
                take = min(take, have // need)
        return max(0, take)

    def take(self, row: int, count: int, r: Resources) -> None:
        self.cpu[row] -= count * r.cpu_millis
        self.mem[row] -= count * r.memory_bytes
        self.gpu[row] -= count * r.gpus
        self.tpu[row] -= count * r.tpus


class Reservations:
    """A pass's reservations: sets their capacity aside, holds waiting ones, places their trees' jobs."""

    def __init__(self, state: PassState, reservations: Sequence[Reservation], explain: Explain) -> None:
        """`explain(state, constraints, request)` words why no worker takes a request (scheduling.explain_plain)."""
        if any(tree is not None for tree in state.trees):
            raise AssertionError("reservations must be set aside before anything is placed")
        self.state = state
        self.explain = explain
        self.by_job: dict[str, Reservation] = {}
        for reservation in reservations:
            self.by_job.setdefault(reservation.job_id, reservation)
        self.pools: dict[str, _Pool] = {}
        self.holds: dict[str, list[tuple[int, str]]] = {}
        self.reasons: dict[str, str] = {}
        wanted = {w for r in reservations for w in r.held.values()}
        self.row_of = {w.worker_id: row for row, w in enumerate(state.workers) if w.worker_id in wanted}
        for reservation in self.by_job.values():
            if reservation.is_held:
                self._set_aside(reservation)

    # -- 1. set aside ------------------------------------------------------------------------

    def _set_aside(self, reservation: Reservation) -> None:
        """Move what the reservation has left on each of its workers out of the pass's free pool."""
        pool = self.pools[reservation.job_id] = _Pool(reservation)
        held: dict[int, Resources] = {}
        for index, worker_id in sorted(reservation.held.items()):
            row = self.row_of.get(worker_id)
            if row is not None:  # not schedulable now (quarantined, cordoned): its share waits
                held[row] = held.get(row, _ZERO) + reservation.entries[index]
        state = self.state
        for row, amount in held.items():
            left = amount - reservation.used.get(state.workers[row].worker_id, _ZERO)
            left = Resources(
                min(left.cpu_millis, state.free_cpu[row]), min(left.memory_bytes, state.free_mem[row]),
                min(left.gpus, state.free_gpu[row]), min(left.tpus, state.free_tpu[row]),
            )  # fmt: skip
            pool.add(row, left)
            state.aside[row] = state.aside.get(row, _ZERO) + left
            state.free_cpu[row] -= left.cpu_millis
            state.free_mem[row] -= left.memory_bytes
            state.free_gpu[row] -= left.gpus
            state.free_tpu[row] -= left.tpus

    # -- 2. hold -------------------------------------------------------------------------------

    def hold_waiting(self) -> None:
        """Hold reservations not held yet (whole or not at all) and replace lost entries, oldest first."""
        waiting = [r for r in self.by_job.values() if r.missing()]
        waiting.sort(key=lambda r: -r.waited_seconds)
        for reservation in waiting:
            outer = tree_root(reservation.job_id, self.by_job)
            if outer is not None:
                self.reasons[reservation.reservation_id] = (
                    f"reservations do not nest: {reservation.job_id} runs inside "
                    f"{self.by_job[outer].reservation_id}"
                )
                continue
            self._hold(reservation)

    def _hold(self, reservation: Reservation) -> None:
        """Hold the reservation's missing entries, each on the first worker in best-fit order where it fits.

        Taken for real as they are found (the capacity trees find them), and given back if a first
        hold turns out not to fit whole: nothing else has been placed yet in this pass.
        """
        state = self.state
        probe = PendingJob(
            reservation.reservation_id, (), _ZERO, reservation.constraints, tolerations=reservation.tolerations
        )
        feasibility = state.feasibility_for(probe)
        missing = sorted(reservation.missing(), key=lambda i: _size(reservation.entries[i]), reverse=True)
        whole = not reservation.is_held  # the first hold is all or nothing; replacements go one by one
        chosen: list[tuple[int, int]] = []
        short: list[int] = []
        for index in missing:
            entry = reservation.entries[index]
            row = self._first_fit(feasibility, entry)
            if row < 0:
                short.append(index)
                if whole:
                    break
                continue
            state._consume(row, 1, entry)
            chosen.append((index, row))
        if whole and short:
            for index, row in chosen:
                self._give_back(row, reservation.entries[index])
            found = f"room for {len(chosen)} of {len(missing)} entries; " if chosen else ""
            self.reasons[reservation.reservation_id] = found + self._why_not(
                reservation, feasibility.constraints, short[0]
            )
            return
        if whole and not self._own_tasks_fit(reservation.job_id):
            # Held, it would leave the reserving job's own tasks no room (they are placed outside it): the job
            # could never run, and the fleet would stay held for nothing. It waits until both fit.
            for index, row in chosen:
                self._give_back(row, reservation.entries[index])
            self.reasons[reservation.reservation_id] = (
                f"held, it would leave no room for the tasks of {reservation.job_id} itself (they run outside it)"
            )
            return
        pool = self.pools.get(reservation.job_id)
        if pool is None:
            pool = self.pools[reservation.job_id] = _Pool(reservation)
        holds = self.holds.setdefault(reservation.reservation_id, [])
        for index, row in chosen:
            entry = reservation.entries[index]
            state.aside[row] = state.aside.get(row, _ZERO) + entry
            pool.add(row, entry)
            holds.append((index, state.workers[row].worker_id))
        if short:
            self.reasons[reservation.reservation_id] = (
                f"{len(short)} of {len(reservation.entries)} entries wait for a replacement worker: "
                + self._why_not(reservation, feasibility.constraints, short[0])
            )

    def _own_tasks_fit(self, job_id: str) -> bool:
        """Whether the reserving job's own pending tasks (none once they run) fit in the free capacity left, counting
        whole tasks per worker (a lower bound's check: a gang's groups are not looked at)."""
        job = next((j for j in self.state.jobs if j.job_id == job_id), None)
        if job is None or not job.task_indices:
            return True
        r = job.request
        state = self.state
        need = len(job.task_indices)
        for row in state.ordered(state.feasibility_for(job)):
            if state.reserved[row]:
                continue
            free = (state.free_cpu[row], state.free_mem[row], state.free_gpu[row], state.free_tpu[row])
            fits = [f // w for f, w in zip(free, (r.cpu_millis, r.memory_bytes, r.gpus, r.tpus), strict=True) if w]
            need -= min(fits) if fits else need
            if need <= 0:
                return True
        return False

    def _first_fit(self, feasibility: Feasibility, entry: Resources) -> int:
        """The first feasible worker in best-fit order with room for `entry`, or -1 (class trees when it can)."""
        state = self.state
        rc, rm, rg, rt = entry.cpu_millis, entry.memory_bytes, entry.gpus, entry.tpus
        if feasibility.classes is not None:
            for class_id in feasibility.classes:
                position = state.tree(class_id).first_fit(rc, rm, rg, rt)
                if position >= 0:
                    return state.members[class_id][position]
            return -1
        fc, fm, fg, ft, reserved = state.free_cpu, state.free_mem, state.free_gpu, state.free_tpu, state.reserved
        for row in state.ordered(feasibility):
            if not reserved[row] and fc[row] >= rc and fm[row] >= rm and fg[row] >= rg and ft[row] >= rt:
                return row
        return -1

    def _give_back(self, row: int, entry: Resources) -> None:
        """Undo a tentative hold (before anything else in the pass used the worker)."""
        state = self.state
        state.free_cpu[row] += entry.cpu_millis
        state.free_mem[row] += entry.memory_bytes
        state.free_gpu[row] += entry.gpus
        state.free_tpu[row] += entry.tpus
        tree = state.trees[state.index.class_of[row]]
        if tree is not None:
            tree.give_back(
                state.position[row], state.free_cpu[row], state.free_mem[row], state.free_gpu[row], state.free_tpu[row]
            )

    def _why_not(self, reservation: Reservation, constraints: Sequence[Constraint], index: int) -> str:
        """Why an entry fits no worker: "entry 2 (1 cpu, 1GiB): 0/4 workers: 3 lack zone=a, 1 have < 1 free cpu"."""
        entry = reservation.entries[index]
        return f"entry {index} ({format_amount(entry)}): {self.explain(self.state, constraints, entry)}"

    # -- 3. place inside -----------------------------------------------------------------------

    def place(self, job: PendingJob) -> bool:
        """Place a job of a reservation's tree inside it (or explain why not); False if no reservation governs it."""
        reservation = governing(job.job_id, self.by_job)
        if reservation is None:
            return False
        state = self.state
        pool = self.pools.get(reservation.job_id)
        if pool is None or not pool.rows:
            why = self.reasons.get(reservation.reservation_id, "its workers are not schedulable now")
            if reservation.is_held:
                state.reasons[job.job_id] = f"reservation {reservation.reservation_id} has no worker now: {why}"
            else:
                state.reasons[job.job_id] = f"waiting for reservation {reservation.reservation_id} to be held: {why}"
            return True
        rows = [row for row in pool.rows if self._feasible(job, row)]
        if job.preferences:
            placed = self._place_preferred(job, pool, rows)
        else:
            placed = self._place_gang(job, pool, rows) if job.group_by else self._place_plain(job, pool, rows)
        total = len(job.task_indices)
        if placed < total:
            reason = self._explain(job, reservation, pool, rows)
            state.reasons[job.job_id] = f"placed {placed} of {total} tasks; {reason}" if placed else reason
        return True

    def _feasible(self, job: PendingJob, row: int) -> bool:
        """The job's constraints and the worker's taints allow the row."""
        attributes = self.state.workers[row].attributes
        if job.constraints and not evaluate_all(job.constraints, attributes):
            return False
        taints = [key for key in attributes if key.startswith(TAINT_PREFIX)]
        return not taints or evaluate_all(taint_constraints(job.constraints, job.tolerations, taints), attributes)

    def _place_preferred(self, job: PendingJob, pool: _Pool, rows: Sequence[int]) -> int:
        """Place with soft constraints: workers meeting more of them, from the first, go first
        (`scheduler.preferences`); a gang tries each tier's workers alone, best tier first."""
        workers = self.state.workers
        tier = {row: preference_rank(job.preferences, workers[row].attributes) for row in rows}
        if not job.group_by:
            return self._place_plain(job, pool, sorted(rows, key=lambda row: -tier[row]))
        for level in range(len(job.preferences), 0, -1):
            placed = self._place_gang(job, pool, [row for row in rows if tier[row] >= level])
            if placed:
                return placed
        return self._place_gang(job, pool, rows)

    def _place_plain(self, job: PendingJob, pool: _Pool, rows: Sequence[int]) -> int:
        tasks, request = job.task_indices, job.request
        placed = 0
        for row in rows:
            if placed == len(tasks):
                break
            take = min(len(tasks) - placed, pool.fits(row, request))
            if take <= 0:
                continue
            pool.take(row, take, request)
            _emit(self.state.assignments, job.job_id, tasks[placed : placed + take], self.state.workers[row].worker_id)
            placed += take
        return placed

    def _place_gang(self, job: PendingJob, pool: _Pool, rows: Sequence[int]) -> int:
        """All tasks on distinct reserved workers sharing one `group_by` value, or none."""
        need = len(job.task_indices)
        key = job.group_by or ""
        groups: dict[object, list[int]] = {}
        for row in rows:
            attributes = self.state.workers[row].attributes
            if key in attributes and pool.fits(row, job.request) > 0:
                groups.setdefault((type(attributes[key]).__name__, attributes[key]), []).append(row)
        for members in groups.values():
            if len(members) >= need:
                members.sort(key=lambda row: _member_order(self.state.workers[row]))
                for index, row in zip(sorted(job.task_indices), members[:need], strict=True):
                    pool.take(row, 1, job.request)
                    _emit(self.state.assignments, job.job_id, (index,), self.state.workers[row].worker_id)
                return need
        return 0

    def _explain(self, job: PendingJob, reservation: Reservation, pool: _Pool, rows: Sequence[int]) -> str:
        """"inside reservation rsv-x (2 workers): 2 have < 1 free cpu left in it"; says when it can never fit."""
        name = f"inside reservation {reservation.reservation_id} ({len(pool.rows)} workers)"
        request = job.request
        if not any(request.fits_in(have) for have in _per_worker(reservation)):
            largest = max(reservation.entries, key=_size)
            return (f"{name}: needs {format_amount(request)} per task, more than the reservation holds on any worker "
                    f"(largest entry: {format_amount(largest)})")  # fmt: skip
        parts = []
        infeasible = len(pool.rows) - len(rows)
        if infeasible:
            wanted = ", ".join(describe_constraint(c) for c in job.constraints) or "its tolerations"
            parts.append(f"{infeasible} do not match {wanted}")
        short: Counter[str] = Counter()
        for row in rows:
            dimension = first_short_dimension(request, pool.cpu[row], pool.mem[row], pool.gpu[row], pool.tpu[row])
            if dimension is not None:
                short[dimension] += 1
        parts += [reservation_shortfall(d, n, request) for d, n in short.items()]
        if job.group_by:
            parts.append(f"a gang needs {len(job.task_indices)} of them sharing one {job.group_by}")
        return f"{name}: {join_counts(parts)}"

    def plan(self) -> ReservationPlan:
        return ReservationPlan(
            holds={rid: tuple(held) for rid, held in self.holds.items()}, reasons=dict(self.reasons)
        )


def held_rows(state: PassState, rows: Iterable[int], request: Resources) -> set[int]:
    """Rows where `request` does not fit now but would without what reservations set aside there."""
    aside = state.aside
    out = set()
    for row in rows:
        held = aside.get(row)
        if held is None or state.reserved[row]:
            continue
        c, m, g, t = state.free_cpu[row], state.free_mem[row], state.free_gpu[row], state.free_tpu[row]
        now = c >= request.cpu_millis and m >= request.memory_bytes and g >= request.gpus and t >= request.tpus
        if not now and (
            c + held.cpu_millis >= request.cpu_millis and m + held.memory_bytes >= request.memory_bytes
            and g + held.gpus >= request.gpus and t + held.tpus >= request.tpus
        ):  # fmt: skip
            out.add(row)
    return out


def _per_worker(reservation: Reservation) -> list[Resources]:
    """What the reservation can hold on one worker at most: each entry, and entries held together."""
    together: dict[str, Resources] = {}
    for index, worker_id in reservation.held.items():
        together[worker_id] = together.get(worker_id, _ZERO) + reservation.entries[index]
    return [*reservation.entries, *together.values()]


def _size(entry: Resources) -> tuple[int, int, int, int]:
    return (entry.tpus, entry.gpus, entry.memory_bytes, entry.cpu_millis)


def demand_view(
    workers: Sequence[WorkerSnapshot], jobs: Sequence[PendingJob], reservations: Sequence[Reservation]
) -> tuple[list[WorkerSnapshot], list[PendingJob]]:
    """The fleet and queue as the autoscaler should see them with reservations.

    What a reservation holds and its tree does not use counts as used (a reserved worker is not
    idle, so its slice is not scaled down under the reservation); a reservation's tree asks nothing
    of new capacity (it only runs inside), and the entries a reservation still misses are demand
    like the tasks of a job (one pending job per distinct entry, named after the reservation).
    """
    by_job = {r.job_id: r for r in reservations}
    aside: dict[str, Resources] = {}
    for r in reservations:
        per: dict[str, Resources] = {}
        for index, worker_id in r.held.items():
            per[worker_id] = per.get(worker_id, _ZERO) + r.entries[index]
        for worker_id, held in per.items():
            aside[worker_id] = aside.get(worker_id, _ZERO) + (held - r.used.get(worker_id, _ZERO))
    seen = [
        w if w.worker_id not in aside
        else WorkerSnapshot(w.worker_id, w.free - aside[w.worker_id], w.attributes, w.capacity)
        for w in workers
    ]
    queue = [job for job in jobs if governing(job.job_id, by_job) is None]
    for r in reservations:
        if tree_root(r.job_id, by_job) is not None:
            continue  # nested: never held
        missing: dict[Resources, int] = {}
        for index in r.missing():
            missing[r.entries[index]] = missing.get(r.entries[index], 0) + 1
        for k, (entry, count) in enumerate(missing.items()):
            name = r.reservation_id if k == 0 else f"{r.reservation_id}#{k}"
            queue.append(PendingJob(name, tuple(range(count)), entry, r.constraints, tolerations=r.tolerations))
    return seen, queue
