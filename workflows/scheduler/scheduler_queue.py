"""The scheduler workflow's queue and commit: what waits for a place, and the places committed.

Enqueues add attempts (an attempt already queued or placed is not added twice), releases and
claims give back or book places, and a pass's plan is committed against the state as it is now,
a gang whole or not at all, before anyone is told.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from activities.contracts import Release, UnreadablePayload, task_workflow_id
    from activities.contracts.queueing import EnqueueBatch
    from activities.proto import cluster_pb2 as pb
    from workflows.fleet.worker_lifecycle import WorkerEvent
    from workflows.messages import (
        Assigned,
        Claim,
        Enqueue,
        SchedulingSpec,
        Unschedulable,
    )
    from workflows.scheduler.placement_index import Placement
    from workflows.scheduler.reservation_state import Book
    from workflows.scheduler.scheduler_actions import placed_detail, record
    from workflows.scheduler.scheduler_core import SchedulerCore, held_in_turn
    from workflows.scheduler.scheduler_network import book_ports, needs_network, port_book, task_networks
    from workflows.scheduler.scheduler_phase import SchedulerPhase
    from workflows.scheduler.scheduler_state import PendingEntry

MAX_COMMIT_PER_PASS = 10_000  # placements committed per pass (whole jobs); the rest go in the next pass

if TYPE_CHECKING:
    from workflows.scheduler.scheduler_registration import Registry
    from workflows.scheduler.scheduler_sharing import Sharing


def _decode_enqueues(raw: RawValue) -> EnqueueBatch | list[Enqueue]:
    """An enqueue batch, as `_decode_enqueue` decodes one: columns (EnqueueBatch), or a list of enqueues from
    a controller of an earlier build still sending them while a new one takes over."""
    if raw.payload.data[:1] == b"[":
        return _decode(raw, list[Enqueue], "enqueue_batch")  # type: ignore[no-any-return]
    return _decode(raw, EnqueueBatch, "enqueue_batch")  # type: ignore[no-any-return]


def _decode_enqueue(raw: RawValue) -> Enqueue:
    """An enqueue, converted by the payload converter's per-type plan (activities.contracts.dataclass_json): thousands
    arriving in one workflow task stay far from the deadlock detector."""
    return _decode(raw, Enqueue, "enqueue")  # type: ignore[no-any-return]


def _decode(raw: RawValue, hint: Any, signal: str) -> Any:
    """A payload that does not convert is dropped (UnreadablePayload), not retried forever."""
    try:
        return workflow.payload_converter().from_payload(raw.payload, hint)
    except UnreadablePayload:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, RuntimeError) as err:
        raise UnreadablePayload(f"{signal}: {type(err).__name__}: {err}") from err


SUBMISSION_ORDER_REACH = 64
"""How far back a job's first enqueue may go to take its place by submission time: two jobs' enqueues can
arrive in either order (their workflows' first tasks race), the queue is FIFO by submission (the submitting
client's clock; in team mode the Iris API's). Bounded so that a scheduler rebuilt from a whole fleet's
reports stays linear, and a clock set back can pass no more than that many jobs."""


def queue_in_submission_order(pending: dict[str, PendingEntry], entry: PendingEntry, reach: int) -> None:
    """Add `entry` to the queue before the (at most `reach`) newest entries submitted after it; else last."""
    later: list[str] = []
    for job_id in reversed(pending):
        if pending[job_id].submitted_at <= entry.submitted_at:
            break
        later.append(job_id)
        if len(later) > reach:
            later = []
            break
    moved = [pending.pop(job_id) for job_id in reversed(later)]
    pending[entry.job_id] = entry
    for other in moved:
        pending[other.job_id] = other


class Queue:
    """The scheduler's queue and places (a part of SchedulerWorkflow: scheduler_core says how the parts meet)."""

    def __init__(self, core: SchedulerCore, registry: Registry, sharing: Sharing) -> None:
        self.core = core
        self._registry = registry  # hears of workers that did not pick up their work, or did
        self._sharing = sharing  # charges the places given back
        # Each distinct spec once, by its repr (`_interned`): what a pass and the carry encode once.
        self._specs: dict[str, SchedulingSpec] = {}

    def enqueue(self, raw: RawValue) -> None:
        """Add tasks to the queue; an attempt already queued or placed is not added twice."""
        self._enqueued([_decode_enqueue(raw)])  # decoded at once: an unreadable one is dropped here

    def enqueue_batch(self, raw: RawValue) -> None:
        """Several jobs' enqueues in one signal (coalesced by the controller that sent them); a batch's
        specs are interned once for all its jobs."""
        batch = _decode_enqueues(raw)
        if isinstance(batch, EnqueueBatch):
            try:
                requests = batch.requests([self._interned(spec) for spec in batch.specs])
            except ValueError as err:
                raise UnreadablePayload(str(err)) from err
            self._enqueued(requests, True)
        else:
            self._enqueued(batch)

    @held_in_turn
    def _enqueued(self, requests: list[Enqueue], interned: bool = False) -> None:
        self.core.reports += len(requests)
        for request in requests:
            self.enqueue_one(request, interned)

    def enqueue_one(self, request: Enqueue, interned: bool = False) -> None:
        """Queue what `request` asks for; `interned`: its spec is the queue's object for it already."""
        entry = self.core.state.pending.get(request.job_id)
        if entry is None:
            spec = request.spec if interned else self._interned(request.spec)
            entry = PendingEntry(request.job_id, spec, {}, request.submitted_at or self.core.now())
            first = not any(request.attempts.values())  # a job's first enqueue, not a retry's
            queue_in_submission_order(self.core.state.pending, entry, SUBMISSION_ORDER_REACH if first else 0)
        retried = []
        placements = self.core.state.placements
        # A job none of whose tasks holds a place (a new job: the common case) has no attempt to look up per task.
        placed_attempt = placements.placed_attempt if placements.placed(request.job_id) else None
        attempts = entry.attempts
        for index, attempt in request.attempts.items():
            if placed_attempt is not None and placed_attempt(request.job_id, index) >= attempt:
                continue
            if attempts.get(index, -1) < attempt:
                attempts[index] = attempt
                if attempt > 0:
                    retried.append(f"task {index} attempt {attempt}")
        if retried:
            now = self.core.now()
            record(self.core.state.actions, now, "tasks requeued", "job", request.job_id, ", ".join(retried), ok=False)
        if not entry.attempts:
            del self.core.state.pending[request.job_id]
        self.core.changed()

    def _interned(self, spec: SchedulingSpec) -> SchedulingSpec:
        """The queue's object for a spec equal to this one (this one, the first time): jobs submitted alike
        share one, so the snapshot encodes its part once (snapshot_cache) and the carry writes it once
        (scheduler_carry). Each enqueue decodes a spec object of its own; 9,000 of them took a run's pack
        ~0.2 s to write out one by one. Specs are values here, never changed in place."""
        key = repr(spec)  # a dataclass's repr shows every field, nested ones too
        known = self._specs.get(key)
        if known is None:
            if len(self._specs) > 2 * len(self.core.state.pending) + 100:
                self._specs = {}  # mostly specs of jobs gone: kept bounded
            known = self._specs[key] = spec
        return known

    @held_in_turn
    def claim(self, claim: Claim) -> None:
        """A task holds a place this scheduler does not know of (it started empty): book it."""
        self.core.reports += 1
        key = task_workflow_id(claim.job_id, claim.task_index)
        held = self.core.state.placements.get(key)
        if held is not None and held.attempt >= claim.attempt:
            return
        spec = claim.spec
        self.core.state.placements[key] = Placement(claim.job_id, claim.task_index, claim.attempt, claim.worker_id,
                                               spec.cpu_millis, spec.memory_bytes, spec.gpus, spec.tpus,
                                               dict(claim.ports), spec.user, spec.band or "interactive",
                                               bool(spec.group_by), self.core.now())  # fmt: skip
        if claim.ports:
            self.core.state.ported.add(key)
        entry = self.core.state.pending.get(claim.job_id)
        if entry is not None and entry.attempts.get(claim.task_index, -1) <= claim.attempt:
            entry.attempts.pop(claim.task_index, None)
            if not entry.attempts:
                del self.core.state.pending[claim.job_id]
        self.core.changed()

    @held_in_turn
    def release(self, request: Release) -> None:
        self._on_release(request)

    @held_in_turn
    def release_batch(self, requests: list[Release]) -> None:
        """Several releases in one signal (coalesced by the agent whose tasks ended)."""
        for request in requests:
            self._on_release(request)

    def _on_release(self, request: Release) -> None:
        placement = self.release_place(request.job_id, request.task_index, request.attempt, request.ran_seconds)
        worker = self.core.state.workers.get(request.dispatch_failed_on)
        if worker is not None and request.dispatch_failed_session not in ("", worker.session):
            # Placed on an agent that has since restarted: the new agent polls, do not shut it out.
            workflow.logger.info("worker %s: what its previous agent did not pick up is not counted", worker.worker_id)
        elif worker is not None:
            self._registry.worker_event(worker, WorkerEvent.DISPATCH_FAILED)
        elif placement is not None:  # this attempt held its place, so it ran
            ran_on = self.core.state.workers.get(placement.worker_id)
            if ran_on is not None and ran_on.dispatch_failures:
                self._registry.worker_event(ran_on, WorkerEvent.RAN_TASK)

    def release_place(
        self, job_id: str, task_index: int, attempt: int, ran_seconds: float = -1.0
    ) -> Placement | None:  # fmt: skip
        """Give back this attempt's place (and drop it from the queue); the place released, if it held one."""
        entry = self.core.state.pending.get(job_id)
        if entry is not None and entry.attempts.get(task_index) == attempt:
            del entry.attempts[task_index]
            self.core.snapshot = None
            if not entry.attempts:
                del self.core.state.pending[job_id]
                self.core.state.pending_reasons.pop(job_id, None)
        placement = self.core.state.placements.release(task_workflow_id(job_id, task_index), attempt)
        if placement is not None:
            self._sharing.charge_release(placement, ran_seconds)  # with the placement's deletion: charged once
            waiting = self.core.state.pending.get(job_id)
            if waiting is not None and waiting.spec.max_concurrent:  # its cap has room: the fleet's clock starts
                waiting.room_at = self.core.now()
            self.core.changed()
        return placement

    def commit(
        self, plan: pb.SchedulingPlan, *, now: float, limit: int | None = MAX_COMMIT_PER_PASS,
        jobs: dict[str, list[pb.SchedulingAssignment]] | None = None, used: dict[str, list[int]] | None = None,
    ) -> list[tuple[str, Assigned, pb.SchedulingAssignment]]:  # fmt: skip
        """Commit the plan's capacity, re-checked against the state now, before anyone is told.

        Handlers may have run while the scheduling activity did (a worker lost, a
        task released or killed), so each placement is checked again; a gang is
        committed whole or not at all. No await in here: the check and the commit
        see one state. `now` (workflow time) is when the placements start to be charged. With `jobs`
        (job id -> its assignments), only those are committed (the announcement commits a batch at a
        time); with `used` (`committed(state)`, or more), the capacity taken is read from it, where it has
        the worker's row, and added to it.
        """
        book = Book(self.core.state) if self.core.state.reservations else None  # reservations: their own check
        if book is not None or used is None:
            used = {}  # rows copied from the placements' totals when first touched (not 10,000 rows a batch)
        kept = self.core.state.placements.used  # a row is copied before a placement here changes it
        by_job = jobs
        if by_job is None:
            by_job = {}
            for a in plan.assignments:
                by_job.setdefault(a.job_id, []).append(a)
        accepted: list[tuple[str, Assigned, pb.SchedulingAssignment]] = []
        port_bookings = None  # the ports live tasks hold, built once a job needs some
        workers = self.core.state.workers
        for job_id, assignments in by_job.items():
            if limit is not None and len(accepted) >= limit:
                self.core.dirty = True  # the rest of the plan waits for the next pass, computed afresh
                break
            entry = self.core.state.pending.get(job_id)
            if entry is None:
                continue
            spec = entry.spec
            band = plan.effective_bands.get(job_id) or spec.band or "interactive"
            need = (spec.cpu_millis, spec.memory_bytes, spec.gpus, spec.tpus)
            # A gang books on copies of the rows it touches, taken into `used` only if it is placed whole.
            gang = bool(spec.group_by) and book is None
            trial: dict[str, list[int]] = {} if gang else used
            trial_book = book.copy() if spec.group_by and book is not None else book
            fitting = []
            for a in assignments:
                worker = workers.get(a.worker_id)
                row = worker.row if worker is not None and worker.healthy and a.task_index in entry.attempts else None
                if row is None or row.cordoned:  # lost, no longer queued, or cordoned while the pass ran
                    ok = False
                elif trial_book is not None:
                    capacity = (row.cpu_millis, row.memory_bytes, row.gpus, row.tpus)
                    ok = trial_book.place(job_id, a.worker_id, need, capacity)
                else:
                    u = trial.get(a.worker_id)
                    if u is None:
                        used_row = used.get(a.worker_id) or kept.get(a.worker_id)
                        u = trial[a.worker_id] = list(used_row) if used_row is not None else [0, 0, 0, 0]
                    ok = (u[0] + need[0] <= row.cpu_millis and u[1] + need[1] <= row.memory_bytes
                          and u[2] + need[2] <= row.gpus and u[3] + need[3] <= row.tpus)  # fmt: skip
                    if ok:
                        u[0] += need[0]
                        u[1] += need[1]
                        u[2] += need[2]
                        u[3] += need[3]
                if ok:
                    fitting.append(a)
                elif spec.group_by:
                    fitting = []  # all or nothing: the gang waits for the next pass
                    break
            ports: dict[int, dict[str, int]] = {}
            if fitting and needs_network(spec):
                port_bookings = port_bookings or port_book(self.core.state)
                ports = book_ports(self.core.state, port_bookings, spec, fitting)
                if spec.group_by and len(ports) < len(fitting):
                    fitting = []  # a host has no port left: the gang waits, whole
                fitting = [a for a in fitting if a.task_index in ports]
            if spec.group_by and fitting:
                if book is None:
                    used.update(trial)  # in place: the caller's `used` sees the gang too
                book = trial_book
            reservation_id = book.reservation_of(job_id) if book is not None else ""
            attempts = [entry.attempts.pop(a.task_index) for a in fitting]
            if fitting:
                shape = (spec.cpu_millis, spec.memory_bytes, spec.gpus, spec.tpus, spec.user, band, bool(spec.group_by))
                places = [(a.task_index, attempt, a.worker_id) for a, attempt in zip(fitting, attempts, strict=True)]
                self.core.state.placements.place_job(job_id, shape, places, now, ports)
                self.core.state.ported.update(task_workflow_id(job_id, i) for i, held in ports.items() if held)
            networks = task_networks(self.core.state, job_id, spec, fitting) if needs_network(spec) else {}
            for a, attempt in zip(fitting, attempts, strict=True):
                placed_on = workers[a.worker_id].row
                assigned = Assigned(attempt=attempt, worker_id=a.worker_id, session=placed_on.session,
                                    network=networks.get(a.task_index), reservation_id=reservation_id,
                                    heartbeat_timeout_seconds=placed_on.heartbeat_timeout_seconds)  # fmt: skip
                accepted.append((task_workflow_id(job_id, a.task_index), assigned, a))
            if fitting:
                detail = placed_detail([a.task_index for a in fitting], [a.worker_id for a in fitting])
                record(self.core.state.actions, now, "tasks placed", "job", job_id, detail)
            if not entry.attempts:
                del self.core.state.pending[job_id]
        return accepted

    def take_timed_out(self, plan: pb.SchedulingPlan) -> list[tuple[str, Unschedulable]]:
        """Take the tasks whose scheduling timeout passed out of the queue; what to tell each."""
        told = []
        for t in plan.timed_out:
            entry = self.core.state.pending.get(t.job_id)
            if entry is None or t.task_index not in entry.attempts:
                continue
            attempt = entry.attempts.pop(t.task_index)
            if not entry.attempts:
                del self.core.state.pending[t.job_id]
            reason = plan.pending_reasons.get(t.job_id) or self.core.state.pending_reasons.get(t.job_id, "")
            told.append(
                (
                    task_workflow_id(t.job_id, t.task_index),
                    Unschedulable(attempt=attempt, reason=reason or "scheduling timeout passed"),
                )
            )
        return told

    def pending_reason(self, job_id: str) -> str:
        return self.core.state.pending_reasons.get(job_id, "")

    def summary(self) -> pb.ClusterSummary:
        if self.core.phase is SchedulerPhase.HANDED_OVER:  # this run continued as new: as it handed the state over
            assert self.core.handed_over is not None
            return self.core.handed_over
        return pb.ClusterSummary(
            store_url=self.core.state.store_url,
            healthy_workers=self._registry.healthy_worker_count(),
            total_workers=len(self.core.state.workers),
            pending_tasks=sum(len(e.attempts) for e in self.core.state.pending.values()),
            running_tasks=len(self.core.state.placements),
        )
