"""SchedulerWorkflow: the singleton that owns the worker registry and committed capacity.

It wakes at once on submission, registration and completion (signals set a
dirty flag) and on a 1 s timer that is armed only while tasks are pending, so
an idle cluster writes no history. Each pass calls the pure scheduler as a
local activity on a compact snapshot, then commits capacity *before* it tells
a task where to run. Every handler is idempotent; state lives in one dataclass
handed whole to continue-as-new.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import DELIVER_SIGNALS, Delivery
    from activities.proto import cluster_pb2 as pb
    from activities.proto.values import get_attr, set_attr
    from workflows.ids import SIGNALS_BY_ACTIVITY, task_workflow_id
    from workflows.messages import (
        Assigned,
        CordonWorkers,
        Enqueue,
        RegisterResult,
        Release,
        RemoveWorkers,
        SchedulingSpec,
        Unschedulable,
        WorkerLost,
    )

FIND_ASSIGNMENTS = "find_assignments"  # activities.scheduling.FIND_ASSIGNMENTS, by name
PASS_INTERVAL = timedelta(seconds=1)
QUARANTINE = timedelta(seconds=30)
QUARANTINE_MAX = timedelta(minutes=10)
MAX_SIGNALS_IN_FLIGHT = 1000  # Temporal allows 2,000 pending outgoing signals per workflow
SUPPORTED_RUNTIMES = ("process", "docker", "containerd")


@dataclass
class WorkerEntry:
    worker_id: str
    session: str
    cpu_millis: int
    memory_bytes: int
    gpus: int
    tpus: int
    attributes: dict[str, Any]  # str | int | float | bool; Any keeps JSON types intact
    runtime: str = "process"
    healthy: bool = True
    suspect_until: float = 0.0  # workflow time; a worker that failed a dispatch gets no work until then
    dispatch_failures: int = 0  # consecutive; doubles the quarantine
    cordoned: bool = False  # no new work; running tasks go on (a draining slice)


@dataclass
class PendingEntry:
    job_id: str
    spec: SchedulingSpec
    attempts: dict[int, int]  # task index -> attempt waiting for a place
    submitted_at: float


@dataclass
class Placement:
    job_id: str
    task_index: int
    attempt: int
    worker_id: str
    cpu_millis: int
    memory_bytes: int
    gpus: int
    tpus: int


@dataclass
class SchedulerState:
    store_url: str = ""
    workers: dict[str, WorkerEntry] = field(default_factory=dict)
    pending: dict[str, PendingEntry] = field(default_factory=dict)  # FIFO by insertion
    placements: dict[str, Placement] = field(default_factory=dict)  # task workflow id -> placement
    pending_reasons: dict[str, str] = field(default_factory=dict)


def _validate_metadata(meta: pb.WorkerMetadata) -> str:
    """A reason to refuse this registration, or "" when it is acceptable."""
    if not meta.worker_id:
        return "worker_id is empty"
    if len(meta.worker_id) > 200 or any(c in meta.worker_id for c in "/\x00\n"):
        return f"worker_id {meta.worker_id!r} must be at most 200 characters without '/', NUL or newlines"
    cap = meta.capacity
    for name in ("cpu_millis", "memory_bytes", "gpus", "tpus"):
        if getattr(cap, name) < 0:
            return f"capacity.{name} is negative ({getattr(cap, name)})"
    if cap.cpu_millis == 0 and cap.memory_bytes == 0:
        return "capacity is empty: a worker needs some cpu or memory"
    for key, value in meta.attributes.items():
        if not key:
            return "attribute with an empty key"
        if value.WhichOneof("kind") is None:
            return f"attribute {key!r} has no value (supported: string, int, float, bool)"
    if meta.runtime and meta.runtime not in SUPPORTED_RUNTIMES:
        return f"runtime {meta.runtime!r} is not one of {', '.join(SUPPORTED_RUNTIMES)}"
    return ""


def committed(state: SchedulerState) -> dict[str, list[int]]:
    """Committed cpu, memory, gpus, tpus per worker, from the placements."""
    used: dict[str, list[int]] = {}
    for p in state.placements.values():
        u = used.setdefault(p.worker_id, [0, 0, 0, 0])
        u[0] += p.cpu_millis
        u[1] += p.memory_bytes
        u[2] += p.gpus
        u[3] += p.tpus
    return used


def encode_snapshot(state: SchedulerState, now: float) -> bytes:
    """The scheduling activity's input: healthy workers' free capacity and the queue, zlib(protobuf)."""
    snap = pb.SchedulingSnapshot()
    used = committed(state)
    for w in state.workers.values():
        if not w.healthy or w.cordoned or w.suspect_until > now:
            continue
        u = used.get(w.worker_id, [0, 0, 0, 0])
        sw = snap.workers.add(worker_id=w.worker_id)
        sw.free.cpu_millis = max(0, w.cpu_millis - u[0])
        sw.free.memory_bytes = max(0, w.memory_bytes - u[1])
        sw.free.gpus = max(0, w.gpus - u[2])
        sw.free.tpus = max(0, w.tpus - u[3])
        sw.capacity.cpu_millis, sw.capacity.memory_bytes = w.cpu_millis, w.memory_bytes
        sw.capacity.gpus, sw.capacity.tpus = w.gpus, w.tpus
        for key, value in w.attributes.items():
            set_attr(sw.attributes[key], value)
    for entry in state.pending.values():
        spec = entry.spec
        sj = snap.jobs.add(
            job_id=entry.job_id,
            task_indices=sorted(entry.attempts),
            group_by=spec.group_by,
            priority=spec.priority,
            waited_seconds=max(0.0, now - entry.submitted_at),
            scheduling_timeout_seconds=spec.scheduling_timeout_seconds,
            tolerations=spec.tolerations,
        )
        sj.request.cpu_millis = spec.cpu_millis
        sj.request.memory_bytes = spec.memory_bytes
        sj.request.gpus = spec.gpus
        sj.request.tpus = spec.tpus
        for c in spec.constraints:
            sc = sj.constraints.add(key=c.key, op=c.op)
            if c.value is not None:
                set_attr(sc.value, c.value)
    return zlib.compress(snap.SerializeToString(), 1)


@workflow.defn(name="SchedulerWorkflow")
class SchedulerWorkflow:
    @workflow.init
    def __init__(self, state: SchedulerState | None = None) -> None:
        # State is taken here, not in run(): signals delivered in a new run's first workflow
        # task are handled before run() starts and must land on the carried-over state.
        self.state = state or SchedulerState()
        self._dirty = state is not None
        self._signals_in_flight = 0
        self._signals_by_activity = True
        # The last encoded snapshot, reused by `autoscale_snapshot` until the state changes.
        self._snapshot: bytes | None = None

    @workflow.run
    async def run(self, state: SchedulerState | None = None) -> None:
        # Decided once, before any local activity runs: a patch first checked right after a local
        # activity can fall into a later workflow task than on replay, which then fails as
        # non-deterministic (seen when a run was evicted and replayed).
        self._signals_by_activity = workflow.patched(SIGNALS_BY_ACTIVITY)
        while True:
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self._dirty, timeout=PASS_INTERVAL if self.state.pending else None
                )
            self._dirty = False
            if self.state.pending:
                await self._scheduling_pass()
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(
                    lambda: workflow.all_handlers_finished() and self._signals_in_flight == 0
                )
                workflow.continue_as_new(self.state)

    # -- the pass ----------------------------------------------------------------------------

    def _changed(self) -> None:
        """The state changed: wake the loop and forget the cached snapshot."""
        self._dirty = True
        self._snapshot = None

    async def _scheduling_pass(self) -> None:
        self._snapshot = snapshot = encode_snapshot(self.state, workflow.now().timestamp())
        plan_bytes = await workflow.execute_local_activity(
            FIND_ASSIGNMENTS,
            snapshot,
            result_type=bytes,
            start_to_close_timeout=timedelta(seconds=60),
        )
        plan = pb.SchedulingPlan.FromString(zlib.decompress(plan_bytes))
        if plan.assignments or plan.timed_out:
            self._snapshot = None
        if self._signals_by_activity:
            await self._announce(plan)
        else:  # how runs that began before the patch go on, so their histories replay
            for key, assigned, placed in self._commit(plan):
                await self._send(key, "assigned", assigned, placed)
            for key, unschedulable in self._take_timed_out(plan):
                await self._send(key, "unschedulable", unschedulable, None)
        self.state.pending_reasons = {
            job_id: reason for job_id, reason in plan.pending_reasons.items() if job_id in self.state.pending
        }

    async def _announce(self, plan: pb.SchedulingPlan) -> None:
        """Commit the plan, then tell every task in one batch; a task that is gone gives its place back."""
        outgoing: list[tuple[Delivery, pb.SchedulingAssignment | None]] = [
            (Delivery(key, "assigned", assigned), placed) for key, assigned, placed in self._commit(plan)
        ]
        outgoing += [(Delivery(key, "unschedulable", arg), None) for key, arg in self._take_timed_out(plan)]
        if not outgoing:
            return
        gone = await workflow.execute_local_activity(
            DELIVER_SIGNALS,
            [delivery for delivery, _ in outgoing],
            result_type=list[int],
            start_to_close_timeout=timedelta(seconds=60),
        )
        for index in gone:
            delivery, placed = outgoing[index]
            if placed is not None:
                self._release(placed.job_id, placed.task_index, delivery.arg.attempt)

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
            reason = self.state.pending_reasons.get(t.job_id, "")
            told.append(
                (
                    task_workflow_id(t.job_id, t.task_index),
                    Unschedulable(attempt=attempt, reason=reason or "scheduling timeout passed"),
                )
            )
        return told

    def _commit(self, plan: pb.SchedulingPlan) -> list[tuple[str, Assigned, pb.SchedulingAssignment]]:
        """Commit the plan's capacity, re-checked against the state now, before anyone is told.

        Handlers may have run while the scheduling activity did (a worker lost, a
        task released or killed), so each placement is checked again; a gang is
        committed whole or not at all. No await in here: the check and the commit
        see one state.
        """
        used = committed(self.state)
        by_job: dict[str, list[pb.SchedulingAssignment]] = {}
        for a in plan.assignments:
            by_job.setdefault(a.job_id, []).append(a)
        accepted = []
        for job_id, assignments in by_job.items():
            entry = self.state.pending.get(job_id)
            if entry is None:
                continue
            spec = entry.spec
            need = (spec.cpu_millis, spec.memory_bytes, spec.gpus, spec.tpus)
            trial = {w: list(u) for w, u in used.items()} if spec.group_by else used
            fitting = []
            for a in assignments:
                worker = self.state.workers.get(a.worker_id)
                ok = a.task_index in entry.attempts and worker is not None and worker.healthy
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
                    job_id, a.task_index, attempt, a.worker_id,
                    spec.cpu_millis, spec.memory_bytes, spec.gpus, spec.tpus,
                )
                accepted.append((key, Assigned(attempt=attempt, worker_id=a.worker_id), a))
            if not entry.attempts:
                del self.state.pending[job_id]
        return accepted

    async def _send(self, workflow_id: str, signal: str, arg: Any, placed: pb.SchedulingAssignment | None) -> None:
        """Signal a task without blocking the loop; a task that is gone gives its place back."""
        await workflow.wait_condition(lambda: self._signals_in_flight < MAX_SIGNALS_IN_FLIGHT)
        self._signals_in_flight += 1

        async def deliver() -> None:
            try:
                await workflow.get_external_workflow_handle(workflow_id).signal(signal, arg)
            except Exception:
                if placed is not None:
                    self._release(placed.job_id, placed.task_index, arg.attempt)
            finally:
                self._signals_in_flight -= 1

        asyncio.create_task(deliver())  # noqa: RUF006 - tracked by _signals_in_flight

    def _release(self, job_id: str, task_index: int, attempt: int) -> None:
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
            self._changed()

    # -- handlers ------------------------------------------------------------------------------

    @workflow.signal
    def configure(self, store_url: str) -> None:
        self.state.store_url = store_url

    @workflow.signal
    def enqueue(self, request: Enqueue) -> None:
        """Add tasks to the queue; an attempt already queued or placed is not added twice."""
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

    @workflow.signal
    def release(self, request: Release) -> None:
        self._release(request.job_id, request.task_index, request.attempt)
        worker = self.state.workers.get(request.dispatch_failed_on)
        if worker is not None:
            # Registered but not polling (paused, or died before its liveness monitor started):
            # keep work away from it for a while, longer each time, until it registers again.
            worker.dispatch_failures += 1
            quarantine = min(QUARANTINE_MAX, QUARANTINE * 2 ** (worker.dispatch_failures - 1))
            worker.suspect_until = workflow.now().timestamp() + quarantine.total_seconds()
            self._snapshot = None
            workflow.logger.warning("worker %s did not pick up work; no new work for %s", worker.worker_id, quarantine)

    @workflow.signal
    def worker_lost(self, lost: WorkerLost) -> None:
        worker = self.state.workers.get(lost.worker_id)
        if worker is not None and worker.session == lost.session:
            worker.healthy = False
            self._snapshot = None
            workflow.logger.warning("worker %s lost: %s", lost.worker_id, lost.reason)

    @workflow.signal
    def cordon_workers(self, request: CordonWorkers) -> None:
        """No new work on these workers (or again, with cordoned=False); their running tasks go on."""
        changed = [
            w for worker_id in request.worker_ids
            if (w := self.state.workers.get(worker_id)) is not None and w.cordoned != request.cordoned
        ]
        for worker in changed:
            worker.cordoned = request.cordoned
        if changed:
            self._changed()
            workflow.logger.info(
                "%s %d workers: %s", "cordoned" if request.cordoned else "uncordoned", len(changed), request.reason
            )

    @workflow.signal
    def remove_workers(self, request: RemoveWorkers) -> None:
        """These workers are gone for good: forget them and the capacity their tasks held.

        Their tasks notice on their own (the attempt stops heartbeating) and are retried elsewhere.
        """
        gone = {worker_id for worker_id in request.worker_ids if worker_id in self.state.workers}
        if not gone:
            return
        for worker_id in gone:
            del self.state.workers[worker_id]
        for key in [k for k, p in self.state.placements.items() if p.worker_id in gone]:
            del self.state.placements[key]
        self._changed()
        workflow.logger.info("removed %d workers: %s", len(gone), request.reason)

    @workflow.update
    def register_worker(self, meta: pb.WorkerMetadata) -> RegisterResult:
        """Add or refresh a worker; a restarted agent (new session) replaces its old entry."""
        cap = meta.capacity
        self.state.workers[meta.worker_id] = WorkerEntry(
            worker_id=meta.worker_id,
            session=meta.agent_session,
            cpu_millis=cap.cpu_millis,
            memory_bytes=cap.memory_bytes,
            gpus=cap.gpus,
            tpus=cap.tpus,
            attributes={k: get_attr(v) for k, v in meta.attributes.items()},
            runtime=meta.runtime or "process",
            healthy=True,
        )
        self._changed()
        return RegisterResult(accepted=True)

    @register_worker.validator
    def _check_registration(self, meta: pb.WorkerMetadata) -> None:
        """Refuse malformed metadata before it reaches history; the reason goes back to the agent."""
        reason = _validate_metadata(meta)
        existing = self.state.workers.get(meta.worker_id)
        if not reason and existing is not None and existing.healthy and existing.session != meta.agent_session:
            cap = meta.capacity
            if (existing.cpu_millis, existing.memory_bytes, existing.gpus, existing.tpus) != (
                cap.cpu_millis, cap.memory_bytes, cap.gpus, cap.tpus
            ):
                reason = (
                    f"worker_id {meta.worker_id!r} is already registered and healthy with different "
                    "resources; stop the other agent or pick another id"
                )
        if reason:
            raise ApplicationError(f"registration refused: {reason}", type="InvalidWorker", non_retryable=True)

    @workflow.query
    def healthy_worker_count(self) -> int:
        return sum(1 for w in self.state.workers.values() if w.healthy)

    @workflow.query
    def pending_reason(self, job_id: str) -> str:
        return self.state.pending_reasons.get(job_id, "")

    @workflow.query
    def summary(self) -> pb.ClusterSummary:
        return pb.ClusterSummary(
            store_url=self.state.store_url,
            healthy_workers=self.healthy_worker_count(),
            total_workers=len(self.state.workers),
            pending_tasks=sum(len(e.attempts) for e in self.state.pending.values()),
            running_tasks=len(self.state.placements),
        )

    @workflow.query
    def workers(self) -> pb.WorkerList:
        out = pb.WorkerList()
        by_worker: dict[str, pb.WorkerStatus] = {}
        for w in self.state.workers.values():
            status = out.workers.add(worker_id=w.worker_id, healthy=w.healthy, cordoned=w.cordoned)
            status.capacity.cpu_millis = w.cpu_millis
            status.capacity.memory_bytes = w.memory_bytes
            status.capacity.gpus = w.gpus
            status.capacity.tpus = w.tpus
            for key, value in w.attributes.items():
                set_attr(status.attributes[key], value)
            by_worker[w.worker_id] = status
        for key, p in self.state.placements.items():  # one pass over placements, not one per worker
            held = by_worker.get(p.worker_id)
            if held is not None:
                held.running_tasks.append(key)
                held.committed.cpu_millis += p.cpu_millis
                held.committed.memory_bytes += p.memory_bytes
                held.committed.gpus += p.gpus
                held.committed.tpus += p.tpus
        return out

    @workflow.query
    def autoscale_snapshot(self) -> bytes:
        """zlib(SchedulingSnapshot): the healthy, uncordoned workers' free capacity and the queue.

        The autoscaler asks every few seconds; the last pass's encoding is reused until the state changes.
        """
        if self._snapshot is None:
            self._snapshot = encode_snapshot(self.state, workflow.now().timestamp())
        return self._snapshot
