"""SchedulerWorkflow: the singleton that owns the worker registry and committed capacity.

It wakes at once on submission, registration and completion (signals set a
dirty flag) and on a 1 s timer that is armed only while tasks are pending, so
an idle cluster writes no history. Each pass calls the pure scheduler as a
local activity on a compact snapshot, then commits capacity *before* it tells
a task where to run. Every handler is idempotent; state lives in one dataclass
handed to continue-as-new packed (zlib of positional JSON, see scheduler_state).

Runs are pinned to the controller build that started them (Worker Versioning); when
operators make a new build current, the next workflow task sees it and the run
continues as new onto that build, with its state (see docs/operators.md).

Registration is a signal carrying a batch of hosts (`register_workers`), sent
by each agent's WorkerWorkflow and answered with a `registered` signal, so
10,000 agents do not queue updates on this one workflow. Lost workers stay
listed as unhealthy for LOST_RETENTION, then leave.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import zlib
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy, VersioningBehavior
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        ASSIGNED,
        DELIVER_ASSIGNMENTS,
        DELIVER_SIGNALS,
        REBUILD_SCHEDULER,
        RELEASE_BATCH,
        Delivery,
        DeliveryOutcome,
    )
    from activities.proto import cluster_pb2 as pb
    from activities.proto.values import set_attr
    from workflows.ids import task_workflow_id
    from workflows.messages import (
        Assigned,
        Claim,
        CordonWorkers,
        Enqueue,
        RegisterResult,
        RegistrationReply,
        Release,
        RemoveWorkers,
        Unschedulable,
        WorkerLost,
        enqueue_from_json,
    )
    from workflows.scheduler_state import (
        PendingEntry,
        Placement,
        SchedulerState,
        WorkerEntry,
        committed,
        encode_snapshot,
        pack,
        refusal,
        unpack,
        worker_from_metadata,
    )

FIND_ASSIGNMENTS = "find_assignments"  # activities.scheduling.FIND_ASSIGNMENTS, by name
MAX_COMMIT_PER_PASS = 10_000  # placements committed per pass (whole jobs); the rest go in the next pass
ANNOUNCE_BATCH = 2_000  # deliveries per deliver_signals call
PASS_INTERVAL = timedelta(seconds=1)
# Registration replies, pending reasons and big announce batches are sent by a regular activity. A
# local activity keeps the workflow task open while it runs; when deliveries are slow (a loaded
# server, thousands of them) and more than ~100 signals arrive meanwhile, the server force-closes
# the task and everything it did is redone.
LOCAL_DELIVERY_MAX = 100  # an announce batch this small still goes by local activity: it is the latency path
# A run also continues as new after SIGNAL_BUDGET received signals, at once (before a pass or during
# one, whose plan is then dropped uncommitted), and sends owed registration replies once before it
# does. The server refuses signals past a per-run limit (`history.maximumSignalsPerExecution`,
# 10,000 by default); senders retry a refused signal and it lands on the new run.
SIGNAL_BUDGET = 2_000  # a fifth of the server's limit: room for what arrives while a run closes
REBUILD_GRACE = timedelta(seconds=5)  # after asking, how long claims may still come in before passes resume
QUARANTINE = timedelta(seconds=30)
QUARANTINE_MAX = timedelta(minutes=10)
QUARANTINE_DOUBLINGS = 5  # 30 s * 2**5 > 10 min: more doublings change nothing (and 2**n must not overflow)
# How long a late assignment waits for its task in the background. A task still not there then
# (its job runs but has not started it) goes back to the queue, so it is placed again, and told,
# whenever it comes; its place is given back meanwhile.
LATE_PATIENCE_SECONDS = 60.0
# How long the announcement itself waits for a task that is not there yet: a job's children start
# tens of milliseconds after its enqueue, unless something broke.
ANNOUNCE_GRACE_SECONDS = 2.0
LOST_RETENTION = timedelta(minutes=5)  # a lost worker is listed as unhealthy this long, then removed
PURGE_INTERVAL = timedelta(minutes=1)
# The next run starts on the build that is current then (the run itself is pinned to its own build).
UPGRADE_ON_CONTINUE = workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE

__all__ = ["PendingEntry", "Placement", "SchedulerState", "SchedulerWorkflow", "WorkerEntry", "encode_snapshot"]


T = TypeVar("T")


async def _delivery(name: str, args: list[Any], result_type: type[T], *, local: bool) -> T:
    """Run a delivery activity: local (no workflow task for its reply, 60 s) or regular (120 s)."""
    if local:
        return await workflow.execute_local_activity(
            name, args=args, result_type=result_type, start_to_close_timeout=timedelta(seconds=60)
        )
    return await workflow.execute_activity(
        name, args=args, result_type=result_type, start_to_close_timeout=timedelta(seconds=120)
    )


def _decode_enqueues(raw: RawValue) -> list[Enqueue]:
    """Decode an enqueue batch by hand, as `_decode_enqueue` does one."""
    if raw.payload.metadata.get("encoding") == b"json/plain":
        return [enqueue_from_json(obj) for obj in json.loads(raw.payload.data)]
    return workflow.payload_converter().from_payload(raw.payload, list[Enqueue])  # type: ignore[no-any-return]


def _decode_enqueue(raw: RawValue) -> Enqueue:
    """Decode an enqueue by hand: the generic converter is too slow for thousands per task."""
    if raw.payload.metadata.get("encoding") == b"json/plain":
        return enqueue_from_json(json.loads(raw.payload.data))
    return workflow.payload_converter().from_payload(raw.payload, Enqueue)  # type: ignore[no-any-return]


@workflow.defn(name="SchedulerWorkflow", versioning_behavior=VersioningBehavior.PINNED)
class SchedulerWorkflow:
    @workflow.init
    def __init__(self, packed: bytes | None = None, signal_budget: int = SIGNAL_BUDGET) -> None:
        # State is taken here, not in run(): signals delivered in a new run's first workflow
        # task are handled before run() starts and must land on the carried-over state.
        self.state = unpack(packed) if packed else SchedulerState()
        self._started_empty = not packed
        self._rebuilding: workflow.ActivityHandle[dict[str, int]] | None = None
        self._rebuilt_at: float | None = None
        self._dirty = packed is not None
        self._late_deliveries = 0  # background deliveries of late assignments not finished yet
        self._signals_received = 0
        self._signal_budget = signal_budget  # an argument, so a test can make it small (the sandbox re-imports us)
        self._replies: list[Delivery] = []  # registration answers not sent yet
        self._last_purge = 0.0
        # The last encoded snapshot, reused by `autoscale_snapshot` until the state changes.
        self._snapshot: bytes | None = None

    @workflow.run
    async def run(self, packed: bytes | None = None, signal_budget: int = SIGNAL_BUDGET) -> None:
        if self._started_empty:
            # A run that starts with no state (a terminated scheduler came back) asks the live
            # workers and tasks to report again (activities.recovery). Not awaited: the loop serves
            # the reports (and anything new) as they come in.
            self._rebuilding = workflow.start_activity(
                REBUILD_SCHEDULER, result_type=dict[str, int], start_to_close_timeout=timedelta(minutes=30),
                heartbeat_timeout=timedelta(minutes=2), retry_policy=RetryPolicy(maximum_attempts=5),
            )  # fmt: skip
        while True:
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self._dirty, timeout=PASS_INTERVAL if self.state.pending else None
                )
            self._dirty = False
            if self.state.pending and not self._signal_budget_spent() and not self._rebuild_holds():
                await self._scheduling_pass()
            if self._replies:
                await self._send_replies()
            self._purge_lost()
            if self._run_should_end():
                await workflow.wait_condition(
                    lambda: workflow.all_handlers_finished()
                    and self._late_deliveries == 0  # their places are given back by this run
                )
                # One round: while 10,000 agents register, every round brings new registrations,
                # and waiting for the last one let a run pass the server's signal limit. An
                # agent without its answer registers again (idempotent) and the next run answers.
                if self._replies:
                    await self._send_replies()
                if self._replies:
                    workflow.logger.info("%d registrations answered by the next run", len(self._replies))
                self._purge_lost(force=True)
                workflow.continue_as_new(
                    args=[pack(self.state), self._signal_budget], initial_versioning_behavior=UPGRADE_ON_CONTINUE
                )

    def _run_should_end(self) -> bool:
        """The history is long, the signal budget spent, or operators made another build current."""
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or self._signal_budget_spent()
            or info.is_target_worker_deployment_version_changed()
        )

    def _rebuild_holds(self) -> bool:
        """No pass while a scheduler that started empty hears from the fleet: a queued task must not
        be put where a running task, whose claim has not come in yet, holds the place."""
        if self._rebuilding is None:
            return False
        if not self._rebuilding.done():
            return True
        if self._rebuilding.exception() is not None or not self._rebuilding.result().get("TaskWorkflow"):
            return False  # it could not ask, or there was no task to ask: nothing more will come
        now = workflow.now().timestamp()
        if self._rebuilt_at is None:
            self._rebuilt_at = now
        return now < self._rebuilt_at + REBUILD_GRACE.total_seconds()

    def _signal_budget_spent(self) -> bool:
        return self._signals_received >= self._signal_budget

    async def _send_replies(self) -> None:
        replies, self._replies = self._replies, []
        await self._deliver(replies, urgent=False)

    def _purge_lost(self, force: bool = False) -> None:
        """Remove workers lost more than LOST_RETENTION ago (checked at most once per PURGE_INTERVAL)."""
        now = workflow.now().timestamp()
        if not force and now - self._last_purge < PURGE_INTERVAL.total_seconds():
            return
        self._last_purge = now
        cutoff = now - LOST_RETENTION.total_seconds()
        gone = [w.worker_id for w in self.state.workers.values() if not w.healthy and 0 < w.lost_at < cutoff]
        if gone:
            self._forget(gone)
            workflow.logger.info("removed %d workers lost more than %s ago", len(gone), LOST_RETENTION)

    # -- the pass ----------------------------------------------------------------------------

    def _changed(self) -> None:
        """The state changed: wake the loop and forget the cached snapshot."""
        self._dirty = True
        self._snapshot = None

    async def _scheduling_pass(self) -> None:
        self._snapshot = snapshot = encode_snapshot(self.state, workflow.now().timestamp())
        # A regular activity, not a local one, for two reasons. The plan is in history before
        # anything is committed or announced: a controller that dies mid-pass replays the same
        # plan, so no task is told two different workers (a local activity's plan was only
        # recorded with the task that also sent the "assigned" signals). And the workflow task
        # ends while the pass runs, so signals arriving meanwhile are handled in short tasks of
        # their own (a local activity held the task open, and more than 100 buffered signals
        # made the server force-fail it, seen at 1,000 workers).
        passing = workflow.start_activity(
            FIND_ASSIGNMENTS, snapshot, result_type=bytes, start_to_close_timeout=timedelta(seconds=120)
        )
        await workflow.wait_condition(lambda: passing.done() or self._signal_budget_spent())
        if not passing.done():
            workflow.logger.info("signal budget spent during a pass: continuing as new before it ends")
            return
        plan_bytes = await passing
        plan = pb.SchedulingPlan.FromString(zlib.decompress(plan_bytes))
        if plan.assignments or plan.timed_out:
            self._snapshot = None
        await self._announce(plan)
        # The plan carries only the reasons that changed; jobs that left the queue drop theirs.
        reasons = self.state.pending_reasons
        changed = []
        for job_id, reason in plan.pending_reasons.items():
            if job_id in self.state.pending:
                reasons[job_id] = reason
                changed.append(Delivery(job_id, "pending_reason", reason))
        for job_id in [job_id for job_id in reasons if job_id not in self.state.pending]:
            del reasons[job_id]
        if changed:
            # Each job keeps its reason in its memo, where `wait` and `list_jobs` read it without a query.
            await self._deliver(changed, urgent=False)

    async def _deliver(self, deliveries: list[Delivery], *, urgent: bool) -> list[int]:
        """Send signals by activity; the indices of those whose workflow is gone.

        Only a small, urgent batch (task assignments) goes by local activity, which saves a
        workflow task on the submit-to-running path; everything else by a regular activity.
        """
        local = urgent and len(deliveries) <= LOCAL_DELIVERY_MAX
        return await _delivery(DELIVER_SIGNALS, [deliveries], list[int], local=local)

    async def _announce(self, plan: pb.SchedulingPlan) -> None:
        """Commit the plan, then tell every task in one batch; a task that is gone gives its place back."""
        # What a late assignment needs to go back to the queue (the commit drops emptied entries).
        entries = {a.job_id: self.state.pending[a.job_id] for a in plan.assignments if a.job_id in self.state.pending}
        outgoing: list[tuple[Delivery, pb.SchedulingAssignment | None]] = [
            (Delivery(key, ASSIGNED, assigned), placed) for key, assigned, placed in self._commit(plan)
        ]
        outgoing += [(Delivery(key, "unschedulable", arg), None) for key, arg in self._take_timed_out(plan)]
        # In batches, one workflow task each, so no task holds the 100,000 deliveries of a big
        # pass (the deadlock detector fires after 2 s of workflow code).
        for start in range(0, len(outgoing), ANNOUNCE_BATCH):
            batch = outgoing[start : start + ANNOUNCE_BATCH]
            deliveries = [delivery for delivery, _ in batch]
            outcome = await self._deliver_assignments(deliveries)
            self._give_back(batch, outcome.gone)
            if outcome.late:
                self._deliver_late([batch[i] for i in outcome.late], entries)

    def _give_back(self, batch: list[tuple[Delivery, pb.SchedulingAssignment | None]], gone: list[int]) -> None:
        """The places of the batch's assignments whose task is gone go back to the pool."""
        for index in gone:
            delivery, placed = batch[index]
            if placed is not None:
                self._release(placed.job_id, placed.task_index, delivery.arg.attempt)

    async def _deliver_assignments(self, deliveries: list[Delivery]) -> DeliveryOutcome:
        """Announce a batch as `_deliver` does, with tasks not started yet handed back as late."""
        args = [deliveries, ANNOUNCE_GRACE_SECONDS]
        return await _delivery(DELIVER_ASSIGNMENTS, args, DeliveryOutcome, local=len(deliveries) <= LOCAL_DELIVERY_MAX)

    def _deliver_late(
        self, late: list[tuple[Delivery, pb.SchedulingAssignment | None]], entries: dict[str, PendingEntry]
    ) -> None:
        """Deliver assignments whose task has not started yet without holding the loop: a regular
        activity waits for each task while its job runs. A task that is gone gives its place back;
        one still not there after LATE_PATIENCE_SECONDS gives it back and goes back to the queue.
        The run does not continue as new before this ends."""
        self._late_deliveries += 1
        workflow.logger.info("%d assignments wait for their task to start", len(late))

        async def deliver() -> None:
            try:
                outcome = await workflow.execute_activity(
                    DELIVER_ASSIGNMENTS, args=[[delivery for delivery, _ in late], LATE_PATIENCE_SECONDS],
                    result_type=DeliveryOutcome, start_to_close_timeout=timedelta(seconds=LATE_PATIENCE_SECONDS + 60),
                )  # fmt: skip
                self._give_back(late, outcome.gone + outcome.late)
                for index in outcome.late:
                    delivery, placed = late[index]
                    entry = entries.get(placed.job_id) if placed is not None else None
                    if placed is None or entry is None:
                        continue
                    workflow.logger.warning("task %s did not start: queued again", delivery.workflow_id)
                    attempts = {placed.task_index: delivery.arg.attempt}
                    self._enqueue(Enqueue(entry.job_id, entry.spec, attempts, entry.submitted_at))
            finally:
                self._late_deliveries -= 1

        asyncio.create_task(deliver())  # noqa: RUF006 - tracked by _late_deliveries

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

    def _commit(
        self, plan: pb.SchedulingPlan, limit: int | None = MAX_COMMIT_PER_PASS
    ) -> list[tuple[str, Assigned, pb.SchedulingAssignment]]:
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
        accepted: list[tuple[str, Assigned, pb.SchedulingAssignment]] = []
        for job_id, assignments in by_job.items():
            if limit is not None and len(accepted) >= limit:
                self._dirty = True  # the rest of the plan waits for the next pass, computed afresh
                break
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
                )
                accepted.append((key, Assigned(attempt=attempt, worker_id=a.worker_id), a))
            if not entry.attempts:
                del self.state.pending[job_id]
        return accepted

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
        self._signals_received += 1
        self.state.store_url = store_url

    @workflow.signal
    def enqueue(self, raw: RawValue) -> None:
        """Add tasks to the queue; an attempt already queued or placed is not added twice."""
        self._signals_received += 1
        self._enqueue(_decode_enqueue(raw))

    @workflow.signal
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

    @workflow.signal
    def claim(self, claim: Claim) -> None:
        """A task holds a place this scheduler does not know of (it started empty): book it."""
        self._signals_received += 1
        key = task_workflow_id(claim.job_id, claim.task_index)
        held = self.state.placements.get(key)
        if held is not None and held.attempt >= claim.attempt:
            return
        spec = claim.spec
        self.state.placements[key] = Placement(claim.job_id, claim.task_index, claim.attempt, claim.worker_id,
                                               spec.cpu_millis, spec.memory_bytes, spec.gpus, spec.tpus)  # fmt: skip
        entry = self.state.pending.get(claim.job_id)
        if entry is not None and entry.attempts.get(claim.task_index, -1) <= claim.attempt:
            entry.attempts.pop(claim.task_index, None)
            if not entry.attempts:
                del self.state.pending[claim.job_id]
        self._changed()

    @workflow.signal
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
        self._release(request.job_id, request.task_index, request.attempt)
        worker = self.state.workers.get(request.dispatch_failed_on)
        if worker is not None:
            self._dispatch_failed(worker)
        elif placement is not None and placement.attempt == request.attempt:
            ran_on = self.state.workers.get(placement.worker_id)
            if ran_on is not None and ran_on.dispatch_failures:
                ran_on.dispatch_failures = 0  # it ran a task, so it polls: the next failure starts a new count

    def _dispatch_failed(self, worker: WorkerEntry) -> None:
        """Registered but not polling (paused, hung, or died before its liveness monitor started):
        keep work away from it for a while, longer each time, until it registers again.

        Tasks dispatched together time out together: failures inside the current
        quarantine are one incident, not one doubling each (160 at once made a
        timedelta overflow that failed every workflow task of the scheduler).
        """
        now = workflow.now().timestamp()
        if worker.suspect_until > now:
            return
        worker.dispatch_failures += 1
        quarantine = min(QUARANTINE_MAX, QUARANTINE * 2 ** min(worker.dispatch_failures - 1, QUARANTINE_DOUBLINGS))
        worker.suspect_until = now + quarantine.total_seconds()
        self._snapshot = None
        workflow.logger.warning("worker %s did not pick up work; no new work for %s", worker.worker_id, quarantine)

    @workflow.signal
    def worker_lost(self, lost: WorkerLost) -> None:
        self._signals_received += 1
        worker = self.state.workers.get(lost.worker_id)
        if worker is not None and worker.session == lost.session:
            worker.healthy = False
            worker.lost_at = workflow.now().timestamp()
            self._snapshot = None
            workflow.logger.warning("worker %s lost: %s", lost.worker_id, lost.reason)

    @workflow.signal
    def cordon_workers(self, request: CordonWorkers) -> None:
        """No new work on these workers (or again, with cordoned=False); their running tasks go on."""
        self._signals_received += 1
        if request.only_if_idle and request.cordoned:
            asked = set(request.worker_ids)
            busy = sum(1 for p in self.state.placements.values() if p.worker_id in asked)
            if busy:
                workflow.logger.info("not cordoned (%d tasks placed there): %s", busy, request.reason)
                return
        changed = [
            w
            for worker_id in request.worker_ids
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
        self._signals_received += 1
        gone = [worker_id for worker_id in request.worker_ids if worker_id in self.state.workers]
        if gone:
            self._forget(gone)
            workflow.logger.info("removed %d workers: %s", len(gone), request.reason)

    def _forget(self, worker_ids: list[str]) -> None:
        gone = set(worker_ids)
        for worker_id in gone:
            self.state.workers.pop(worker_id, None)
        for key in [k for k, p in self.state.placements.items() if p.worker_id in gone]:
            del self.state.placements[key]
        self._changed()

    @workflow.signal
    def register_workers(self, batch: pb.WorkerBatch) -> None:
        """Add or refresh one agent's hosts; `reply_to` hears which were refused and why."""
        self._signals_received += 1
        refused = {}
        for meta in batch.workers:
            reason = refusal(self.state, meta)
            if reason:
                refused[meta.worker_id] = f"registration refused: {reason}"
                workflow.logger.warning("worker %s refused: %s", meta.worker_id, reason)
            else:
                self._admit(meta)
        if batch.reply_to:
            self._replies.append(Delivery(batch.reply_to, "registered", RegistrationReply(refused)))
        self._changed()

    @workflow.update
    def register_worker(self, meta: pb.WorkerMetadata) -> RegisterResult:
        """Add or refresh a worker; a restarted agent (new session) replaces its old entry.

        For tools and tests that register one host and need the answer at once; agents send
        `register_workers` through their WorkerWorkflow.
        """
        self._admit(meta)
        self._changed()
        return RegisterResult(accepted=True)

    def _admit(self, meta: pb.WorkerMetadata) -> None:
        """Add or refresh a worker; an operator's cordon outlives the agent's restart."""
        before = self.state.workers.get(meta.worker_id)
        entry = self.state.workers[meta.worker_id] = worker_from_metadata(meta)
        if before is not None and before.cordoned:
            entry.cordoned = True

    @register_worker.validator
    def _check_registration(self, meta: pb.WorkerMetadata) -> None:
        """Refuse malformed metadata before it reaches history; the reason goes back to the agent."""
        reason = refusal(self.state, meta)
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
