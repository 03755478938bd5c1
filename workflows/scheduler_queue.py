"""The scheduler workflow's queue and commit: what waits for a place, and the places committed.

Enqueues add attempts (an attempt already queued or placed is not added twice), releases and
claims give back or book places, and a pass's plan is committed against the state as it is now,
a gang whole or not at all, before anyone is told.
"""

from __future__ import annotations

import json

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        CLAIM,
        ENQUEUE,
        ENQUEUE_BATCH,
        PENDING_REASON,
        RELEASE,
        RELEASE_BATCH,
        SUMMARY_QUERY,
        Release,
        UnreadablePayload,
        task_workflow_id,
    )
    from activities.proto import cluster_pb2 as pb
    from workflows.messages import (
        Assigned,
        Claim,
        Enqueue,
        Unschedulable,
        enqueue_from_json,
    )
    from workflows.scheduler_base import SchedulerBase
    from workflows.scheduler_state import (
        PendingEntry,
        Placement,
        committed,
    )
    from workflows.worker_lifecycle import WorkerEvent

MAX_COMMIT_PER_PASS = 10_000  # placements committed per pass (whole jobs); the rest go in the next pass


def _decode_enqueues(raw: RawValue) -> list[Enqueue]:
    """Decode an enqueue batch by hand, as `_decode_enqueue` does one."""
    try:
        if raw.payload.metadata.get("encoding") == b"json/plain":
            return [enqueue_from_json(obj) for obj in json.loads(raw.payload.data)]
        return workflow.payload_converter().from_payload(raw.payload, list[Enqueue])  # type: ignore[no-any-return]
    except UnreadablePayload:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as err:  # the signal is dropped, not retried
        raise UnreadablePayload(f"enqueue_batch: {type(err).__name__}: {err}") from err


def _decode_enqueue(raw: RawValue) -> Enqueue:
    """Decode an enqueue by hand: the generic converter is too slow for thousands per task."""
    try:
        if raw.payload.metadata.get("encoding") == b"json/plain":
            return enqueue_from_json(json.loads(raw.payload.data))
        return workflow.payload_converter().from_payload(raw.payload, Enqueue)  # type: ignore[no-any-return]
    except UnreadablePayload:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as err:  # the signal is dropped, not retried
        raise UnreadablePayload(f"enqueue: {type(err).__name__}: {err}") from err


class Queue(SchedulerBase):
    """Mixed into SchedulerWorkflow (see its module)."""

    @workflow.signal(name=ENQUEUE)
    def enqueue(self, raw: RawValue) -> None:
        """Add tasks to the queue; an attempt already queued or placed is not added twice."""
        self._signals_received += 1
        self._enqueue(_decode_enqueue(raw))

    @workflow.signal(name=ENQUEUE_BATCH)
    def enqueue_batch(self, raw: RawValue) -> None:
        """Several jobs' enqueues in one signal (coalesced by the controller that sent them)."""
        self._signals_received += 1
        for request in _decode_enqueues(raw):
            self._enqueue(request)

    def _enqueue(self, request: Enqueue) -> None:
        entry = self.state.pending.get(request.job_id)
        if entry is None:
            entry = PendingEntry(request.job_id, request.spec, {}, request.submitted_at or workflow.now().timestamp())
            self.state.pending[request.job_id] = entry
        for index, attempt in request.attempts.items():
            placed = self.state.placements.get(task_workflow_id(request.job_id, index))
            if placed is not None and placed.attempt >= attempt:
                continue
            if entry.attempts.get(index, -1) < attempt:
                entry.attempts[index] = attempt
        if not entry.attempts:
            del self.state.pending[request.job_id]
        self._changed()

    @workflow.signal(name=CLAIM)
    def claim(self, claim: Claim) -> None:
        """A task holds a place this scheduler does not know of (it started empty): book it."""
        self._signals_received += 1
        key = task_workflow_id(claim.job_id, claim.task_index)
        held = self.state.placements.get(key)
        if held is not None and held.attempt >= claim.attempt:
            return
        spec = claim.spec
        self.state.placements[key] = Placement(claim.job_id, claim.task_index, claim.attempt, claim.worker_id,
                                               spec.cpu_millis, spec.memory_bytes, spec.gpus, spec.tpus, spec.user,
                                               spec.band or "interactive", bool(spec.group_by),
                                               workflow.now().timestamp())  # fmt: skip
        entry = self.state.pending.get(claim.job_id)
        if entry is not None and entry.attempts.get(claim.task_index, -1) <= claim.attempt:
            entry.attempts.pop(claim.task_index, None)
            if not entry.attempts:
                del self.state.pending[claim.job_id]
        self._changed()

    @workflow.signal(name=RELEASE)
    def release(self, request: Release) -> None:
        self._signals_received += 1
        self._on_release(request)

    @workflow.signal(name=RELEASE_BATCH)
    def release_batch(self, requests: list[Release]) -> None:
        """Several releases in one signal (coalesced by the agent whose tasks ended)."""
        self._signals_received += 1
        for request in requests:
            self._on_release(request)

    def _on_release(self, request: Release) -> None:
        placement = self.state.placements.get(task_workflow_id(request.job_id, request.task_index))
        self._release(request.job_id, request.task_index, request.attempt, request.ran_seconds)
        worker = self.state.workers.get(request.dispatch_failed_on)
        if worker is not None:
            self._worker_event(worker, WorkerEvent.DISPATCH_FAILED)
        elif placement is not None and placement.attempt == request.attempt:
            ran_on = self.state.workers.get(placement.worker_id)
            if ran_on is not None and ran_on.dispatch_failures:
                self._worker_event(ran_on, WorkerEvent.RAN_TASK)

    def _release(self, job_id: str, task_index: int, attempt: int, ran_seconds: float = -1.0) -> None:
        entry = self.state.pending.get(job_id)
        if entry is not None and entry.attempts.get(task_index) == attempt:
            del entry.attempts[task_index]
            self._snapshot = None
            if not entry.attempts:
                del self.state.pending[job_id]
                self.state.pending_reasons.pop(job_id, None)
        key = task_workflow_id(job_id, task_index)
        placement = self.state.placements.get(key)
        if placement is not None and placement.attempt == attempt:
            del self.state.placements[key]
            self._charge_release(placement, ran_seconds)  # with the placement's deletion: charged once
            self._changed()

    def _commit(
        self, plan: pb.SchedulingPlan, limit: int | None = MAX_COMMIT_PER_PASS, now: float = 0.0
    ) -> list[tuple[str, Assigned, pb.SchedulingAssignment]]:
        """Commit the plan's capacity, re-checked against the state now, before anyone is told.

        Handlers may have run while the scheduling activity did (a worker lost, a
        task released or killed), so each placement is checked again; a gang is
        committed whole or not at all. No await in here: the check and the commit
        see one state. `now` (workflow time) is when the placements start to be charged.
        """
        used = committed(self.state)
        by_job: dict[str, list[pb.SchedulingAssignment]] = {}
        for a in plan.assignments:
            by_job.setdefault(a.job_id, []).append(a)
        accepted: list[tuple[str, Assigned, pb.SchedulingAssignment]] = []
        for job_id, assignments in by_job.items():
            if limit is not None and len(accepted) >= limit:
                self._dirty = True  # the rest of the plan waits for the next pass, computed afresh
                break
            entry = self.state.pending.get(job_id)
            if entry is None:
                continue
            spec = entry.spec
            band = plan.effective_bands.get(job_id) or spec.band or "interactive"
            need = (spec.cpu_millis, spec.memory_bytes, spec.gpus, spec.tpus)
            trial = {w: list(u) for w, u in used.items()} if spec.group_by else used
            fitting = []
            for a in assignments:
                worker = self.state.workers.get(a.worker_id)
                ok = a.task_index in entry.attempts and worker is not None and worker.healthy
                if ok and worker is not None and worker.cordoned:
                    ok = False  # cordoned while the pass ran
                if ok and worker is not None:
                    u = trial.setdefault(a.worker_id, [0, 0, 0, 0])
                    capacity = (worker.cpu_millis, worker.memory_bytes, worker.gpus, worker.tpus)
                    ok = all(u[i] + need[i] <= capacity[i] for i in range(4))
                    if ok:
                        for i in range(4):
                            u[i] += need[i]
                if ok:
                    fitting.append(a)
                elif spec.group_by:
                    fitting = []  # all or nothing: the gang waits for the next pass
                    break
            if spec.group_by and fitting:
                used = trial
            for a in fitting:
                attempt = entry.attempts.pop(a.task_index)
                key = task_workflow_id(job_id, a.task_index)
                self.state.placements[key] = Placement(
                    job_id,
                    a.task_index,
                    attempt,
                    a.worker_id,
                    spec.cpu_millis,
                    spec.memory_bytes,
                    spec.gpus,
                    spec.tpus,
                    spec.user,
                    band,
                    bool(spec.group_by),
                    now,
                )
                assigned = Assigned(attempt=attempt, worker_id=a.worker_id)
                accepted.append((key, assigned, a))
            if not entry.attempts:
                del self.state.pending[job_id]
        return accepted

    def _take_timed_out(self, plan: pb.SchedulingPlan) -> list[tuple[str, Unschedulable]]:
        """Take the tasks whose scheduling timeout passed out of the queue; what to tell each."""
        told = []
        for t in plan.timed_out:
            entry = self.state.pending.get(t.job_id)
            if entry is None or t.task_index not in entry.attempts:
                continue
            attempt = entry.attempts.pop(t.task_index)
            if not entry.attempts:
                del self.state.pending[t.job_id]
            reason = plan.pending_reasons.get(t.job_id) or self.state.pending_reasons.get(t.job_id, "")
            told.append(
                (
                    task_workflow_id(t.job_id, t.task_index),
                    Unschedulable(attempt=attempt, reason=reason or "scheduling timeout passed"),
                )
            )
        return told

    @workflow.query(name=PENDING_REASON)
    def pending_reason(self, job_id: str) -> str:
        return self.state.pending_reasons.get(job_id, "")

    @workflow.query(name=SUMMARY_QUERY)
    def summary(self) -> pb.ClusterSummary:
        return pb.ClusterSummary(
            store_url=self.state.store_url,
            healthy_workers=self.healthy_worker_count(),
            total_workers=len(self.state.workers),
            pending_tasks=sum(len(e.attempts) for e in self.state.pending.values()),
            running_tasks=len(self.state.placements),
        )
