"""SchedulerWorkflow: the singleton that owns the worker registry and committed capacity.

It wakes at once on submission, registration and completion (signals set a
dirty flag) and on a 1 s timer that is armed only while tasks are pending, so
an idle cluster writes no history. Each pass calls the pure scheduler in an
activity on a compact snapshot, then commits capacity *before* it tells a task
where to run. Every handler is idempotent; state lives in one dataclass
handed to continue-as-new packed (its messages serialized: scheduler_carry).

Runs are pinned to the controller build that started them (Worker Versioning); when
operators make a new build current, the next workflow task sees it and the run
continues as new onto that build, with its state (see docs/operators.md).

A thin shell: this module holds the loop and the pass, and every handler, each
handing its signal or query to one part, a plain object of its own module: the registry
(scheduler_registration), the queue and the commit (scheduler_queue), sharing (scheduler_sharing),
the signals it sends (scheduler_delivery), reservations (scheduler_reservations), the dashboard's
pages (scheduler_dashboard) and the run's close, continue-as-new (scheduler_close). What they share,
the state and the run's phase, is scheduler_core.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy, VersioningBehavior

# The parts (scheduler_close, _delivery, _queue, _registration, _reservations, _sharing) are passed through, as the
# state and the carry they work on are: the sandbox executed them afresh for every run, 19-27 ms of each run's first
# workflow task (5.5-7 ms without them). They hold no module state, and their determinism is the replay tests' to
# guard, as the rest of the scheduler's code.
with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        AUTOSCALE_SNAPSHOT_QUERY,
        AUTOSCALER_WORKFLOW_ID,
        CLAIM,
        CONFIGURE_SCHEDULER,
        CONFIGURE_SHARING,
        CORDON_WORKERS,
        DASHBOARD_QUEUE_QUERY,
        DASHBOARD_WORKER_QUERY,
        DASHBOARD_WORKERS_QUERY,
        ENQUEUE,
        ENQUEUE_BATCH,
        HEADROOM,
        HEALTHY_WORKER_QUERY,
        PENDING_REASON,
        REBUILD_SCHEDULER,
        RECENT_ACTIONS_QUERY,
        REGISTER_WORKER_BATCHES,
        REGISTER_WORKERS,
        RELEASE,
        RELEASE_BATCH,
        RELEASE_RESERVATION,
        REMOVE_WORKERS,
        RESERVE,
        SET_CREDITS,
        SUMMARY_QUERY,
        WAKE_AUTOSCALER,
        WORKER_LOST,
        WORKERS_QUERY,
        Delivery,
        Release,
    )
    from activities.proto import cluster_pb2 as pb
    from activities.proto import compressed
    from workflows.messages import Claim, CordonWorkers, RemoveWorkers, Reserve, SetCredits, WorkerLost
    from workflows.scheduler.replayed_inputs import command_input
    from workflows.scheduler.scheduler_actions import ActionRow
    from workflows.scheduler.scheduler_close import CLOSE_SECONDS, Closing
    from workflows.scheduler.scheduler_core import SchedulerCore, held_in_turn
    from workflows.scheduler.scheduler_dashboard import queue_page, worker_status, workers_page
    from workflows.scheduler.scheduler_delivery import PASS_HEARTBEAT, Deliveries
    from workflows.scheduler.scheduler_phase import SchedulerPhase
    from workflows.scheduler.scheduler_queue import Queue
    from workflows.scheduler.scheduler_registration import Registry
    from workflows.scheduler.scheduler_reservations import RESERVATION_CHECK_SECONDS, Reserving
    from workflows.scheduler.scheduler_sharing import Sharing
    from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState
    from workflows.scheduler.sharing_state import SharingSettings

FIND_ASSIGNMENTS = "find_assignments"  # activities.scheduling.FIND_ASSIGNMENTS, by name
PASS_INTERVAL = timedelta(seconds=1)
# A run also continues as new after SIGNAL_BUDGET received signals, at once (before a pass or during
# one, whose plan is then dropped uncommitted), and sends owed registration replies once before it
# does. The server refuses signals past a per-run limit (`history.maximumSignalsPerExecution`,
# 10,000 by default); senders retry a refused signal and it lands on the new run.
SIGNAL_BUDGET = 2_000  # a fifth of the server's limit: room for what arrives while a run closes


@workflow.defn(name="SchedulerWorkflow", versioning_behavior=VersioningBehavior.PINNED)
class SchedulerWorkflow:
    # What a query may set: `autoscale_snapshot` keeps its own answer until the state changes (no decision
    # reads it). Every other attribute is the same after a query as before (iris/controller/query_guard.py checks).
    QUERY_CACHES = ("core.snapshot",)

    @workflow.init
    def __init__(
        self, packed: bytes | None = None, signal_budget: int = SIGNAL_BUDGET,
        reservation_check_seconds: float = RESERVATION_CHECK_SECONDS, close_seconds: float = CLOSE_SECONDS,
    ) -> None:  # fmt: skip
        # State is taken here, not in run(): signals delivered in a new run's first workflow
        # task are handled before run() starts and must land on the carried-over state (loaded whole, in
        # SchedulerCore).
        # The budget, the check and the close's wait are arguments, so a test can set them (the sandbox re-imports us).
        self.core = SchedulerCore(packed, signal_budget)
        self.sharing = Sharing(self.core)
        self.reserving = Reserving(self.core, reservation_check_seconds)
        self.registry = Registry(self.core, self.sharing, self.reserving)
        self.queue = Queue(self.core, self.registry, self.sharing)
        self.deliveries = Deliveries(self.core, self.queue)
        self.closing = Closing(self.core, self.registry, self.reserving, self.deliveries, close_seconds)

    @property
    def state(self) -> SchedulerState:
        return self.core.state

    @state.setter
    def state(self, value: SchedulerState) -> None:
        self.core.state = value

    @workflow.run
    async def run(
        self, packed: bytes | None = None, signal_budget: int = SIGNAL_BUDGET,
        reservation_check_seconds: float = RESERVATION_CHECK_SECONDS, close_seconds: float = CLOSE_SECONDS,
    ) -> None:  # fmt: skip
        core = self.core
        if core.phase is SchedulerPhase.REBUILDING:
            # A run that starts with no state (a terminated scheduler came back) asks the live
            # workers and tasks to report again (activities.recovery). Not awaited: the loop serves
            # the reports (and anything new) as they come in.
            core.rebuilding = workflow.start_activity(
                REBUILD_SCHEDULER, result_type=dict[str, int], start_to_close_timeout=timedelta(minutes=30),
                heartbeat_timeout=timedelta(minutes=2), retry_policy=RetryPolicy(maximum_attempts=5),
            )  # fmt: skip
        while True:
            received = core.signals_received
            # A run that should end packs and hands over on wakes of its own (scheduler_close): a new signal, or a
            # short wait with none. Never on its own flags, which a commit sets in the task it runs in: neither the
            # pack nor the hand-over shares a task with a commit.
            closing = self.closing.waiting
            with contextlib.suppress(TimeoutError):
                if closing:
                    await workflow.wait_condition(self._signal_since(received), timeout=self.closing.wait_seconds())
                else:
                    await workflow.wait_condition(
                        lambda: core.dirty or bool(core.replies),  # answers owed: state, not a flag (send_replies)
                        timeout=PASS_INTERVAL if self._work_waits() else self._idle_timer(),
                    )
            core.dirty = False
            if core.reply_barrier:  # answers owed before what came after them (a `configure`; the last run's)
                await self.deliveries.send_replies()
            if core.held:
                core.apply_held()
            if closing and await self.closing.on_wake(core.signals_received - received):
                continue  # packed: handed over on the next wake if it is quiet (a pass now would make the pack stale)
            if self._work_waits() and not core.signal_budget_spent() and not core.rebuild_holds():
                await self._scheduling_pass()
            if core.replies:
                await self.deliveries.send_replies()
            self.registry.purge_lost()
            self.reserving.check_reserving_jobs()
            self.reserving.publish_reservations()
            core.state.books.expire(workflow.now().timestamp(), core.state.pending)
            self.sharing.publish_users()
            if core.run_should_end():
                self.closing.begin_wait()

    def _signal_since(self, received: int) -> Callable[[], bool]:
        """Whether a signal came in since the run had received `received`."""
        return lambda: self.core.signals_received > received

    def _idle_timer(self) -> timedelta | None:
        """With no pass due: wake for the reservations' checks, or for a user table whose publication waits."""
        timers = [t for t in (self.reserving.reservation_timer(), self.sharing.users_publish_timer()) if t is not None]
        return min(timers) if timers else None

    def _work_waits(self) -> bool:
        """Tasks wait for a place, or a reservation for its workers: passes are due (and the 1 s timer armed).

        A throttled array's tasks held back by its own cap (scheduler/throttle.py) do not count: only one of
        its tasks ending, which wakes the loop anyway, can change that; a long array at its cap arms no timer.
        """
        return any(map(self._may_place, self.state.pending.values())) or self.reserving.reservations_waiting()

    def _may_place(self, entry: PendingEntry) -> bool:
        """Whether a pass could place any of this job's pending tasks (not when it is at its max_concurrent)."""
        cap = entry.spec.max_concurrent
        return not cap or self.state.placements.placed(entry.job_id) < cap

    # -- the pass ----------------------------------------------------------------------------

    async def _scheduling_pass(self) -> None:
        core = self.core
        # Built in this task, in one go: the fleet and the queue as columns, the running work as the placement
        # columns; not when replayed (the plan is in history: replayed_inputs).
        snapshot = command_input(lambda: core.snapshots.build(self.state, workflow.now().timestamp()), b"")
        core.snapshot = core.pass_snapshot = snapshot or None
        # A regular activity, not a local one, for two reasons. The plan is in history before
        # anything is committed or announced: a controller that dies mid-pass replays the same
        # plan, so no task is told two different workers (a local activity's plan was only
        # recorded with the task that also sent the "assigned" signals). And the workflow task
        # ends while the pass runs, so signals arriving meanwhile are handled in short tasks of
        # their own (a local activity held the task open, and more than 100 buffered signals
        # made the server force-fail it, seen at 1,000 workers).
        passing = workflow.start_activity(
            FIND_ASSIGNMENTS, snapshot, result_type=bytes, start_to_close_timeout=timedelta(seconds=120),
            heartbeat_timeout=PASS_HEARTBEAT,
        )  # fmt: skip
        await workflow.wait_condition(lambda: passing.done() or core.signal_budget_spent())
        if not passing.done():
            workflow.logger.info("signal budget spent during a pass: continuing as new before it ends")
            return
        plan_bytes = await passing
        core.apply_held()  # what came in during the pass and waits, before the plan is read
        plan = pb.SchedulingPlan.FromString(compressed.decompress(plan_bytes, "scheduling plan"))
        if plan.assignments or plan.timed_out:
            core.snapshot = None
        self.sharing.queue_entries = list(plan.queue)
        self.reserving.take_holds(plan)  # before the commit: the plan may place a tree's tasks in what it holds
        evictions = self.sharing.take_evictions(plan)  # before the commit: a preemptor waits for its victims
        await self.deliveries.announce(plan)
        told = evictions + self.sharing.tell_bands(plan)
        if told:
            await self.deliveries.deliver(told)
        # The plan carries only the reasons that changed; jobs that left the queue drop theirs.
        reasons = self.state.pending_reasons
        changed = []
        unplaced = 0  # jobs this pass left waiting that had no reason before: new demand for the autoscaler
        for job_id, reason in plan.pending_reasons.items():
            if job_id in self.state.pending:
                unplaced += bool(reason) and not reasons.get(job_id)
                reasons[job_id] = reason
                changed.append(Delivery(job_id, PENDING_REASON, reason))
        for job_id in [job_id for job_id in reasons if job_id not in self.state.pending]:
            del reasons[job_id]
        if unplaced:
            # The autoscaler waits for this instead of polling: one more signal in the same delivery.
            changed.append(Delivery(AUTOSCALER_WORKFLOW_ID, WAKE_AUTOSCALER, unplaced))
        if changed:
            # Each job keeps its reason in its memo, where `wait` and `list_jobs` read it without a query.
            await self.deliveries.deliver(changed)

    # -- handlers: each hands its signal or query to the part it concerns ------------------------

    @workflow.signal(name=CONFIGURE_SCHEDULER)
    @held_in_turn
    def configure(self, store_url: str) -> None:
        """A controller started and names the store. Registration answers owed now go out before any
        signal that came after this one is applied (a barrier, `held_in_turn`).

        A controller's start is when a run is replayed from a cold cache while agents register again,
        and when a query can reach a controller that does not hold the run: the SDK then applies the
        signals that came after the last workflow task ahead of the task itself (docs/reliability.md,
        "Replays"). A run recorded so, the registrations before a `configure` answered a task earlier
        than those after it, replays with this barrier (tests/histories/scheduler-query-split.json).
        """
        self.state.store_url = store_url
        if self.core.replies:
            self.core.reply_barrier = True

    @workflow.signal(name=REGISTER_WORKERS)
    def register_workers(self, batch: pb.WorkerBatch) -> None:
        self.registry.register_workers(batch)

    @workflow.signal(name=REGISTER_WORKER_BATCHES)
    def register_worker_batches(self, batches: pb.WorkerBatches) -> None:
        """Agents' batches as the registrar hands them on (workflows/fleet/registrar_workflow.py)."""
        for batch in batches.batches:
            self.registry.register_workers(batch)

    @workflow.signal(name=WORKER_LOST)
    def worker_lost(self, lost: WorkerLost) -> None:
        self.registry.worker_lost(lost)

    @workflow.signal(name=CORDON_WORKERS)
    def cordon_workers(self, request: CordonWorkers) -> None:
        self.registry.cordon_workers(request)

    @workflow.signal(name=REMOVE_WORKERS)
    def remove_workers(self, request: RemoveWorkers) -> None:
        self.registry.remove_workers(request)

    @workflow.signal(name=ENQUEUE)
    def enqueue(self, raw: RawValue) -> None:
        self.queue.enqueue(raw)

    @workflow.signal(name=ENQUEUE_BATCH)
    def enqueue_batch(self, raw: RawValue) -> None:
        self.queue.enqueue_batch(raw)

    @workflow.signal(name=CLAIM)
    def claim(self, claim: Claim) -> None:
        self.queue.claim(claim)

    @workflow.signal(name=RELEASE)
    def release(self, request: Release) -> None:
        self.queue.release(request)

    @workflow.signal(name=RELEASE_BATCH)
    def release_batch(self, requests: list[Release]) -> None:
        self.queue.release_batch(requests)

    @workflow.signal(name=CONFIGURE_SHARING)
    def configure_sharing(self, settings: SharingSettings) -> None:
        self.sharing.configure_sharing(settings)

    @workflow.signal(name=SET_CREDITS)
    def set_credits(self, request: SetCredits) -> None:
        self.sharing.set_credits(request)

    @workflow.signal(name=HEADROOM)
    def headroom(self, rows: list[list[Any]]) -> None:
        self.sharing.headroom(rows)

    @workflow.signal(name=RESERVE)
    def reserve(self, request: Reserve) -> None:
        self.reserving.reserve(request)

    @workflow.signal(name=RELEASE_RESERVATION)
    def release_reservation(self, job_id: str) -> None:
        self.reserving.release_reservation(job_id)

    @workflow.query(name=HEALTHY_WORKER_QUERY)
    def healthy_worker_count(self) -> int:
        return self.registry.healthy_worker_count()

    @workflow.query(name=WORKERS_QUERY)
    def workers(self, after: str = "") -> pb.WorkerList:
        return self.registry.workers(after)

    @workflow.query(name=PENDING_REASON)
    def pending_reason(self, job_id: str) -> str:
        return self.queue.pending_reason(job_id)

    @workflow.query(name=SUMMARY_QUERY)
    def summary(self) -> pb.ClusterSummary:
        return self.queue.summary()

    @workflow.query(name=RECENT_ACTIONS_QUERY)
    def recent_actions(self) -> list[ActionRow]:
        """The scheduler's last actions (workflows/scheduler/scheduler_actions.py), oldest first: a few KB."""
        return list(self.state.actions)

    @workflow.query(name=DASHBOARD_WORKERS_QUERY)
    def dashboard_workers(self, request: pb.DashboardWorkersRequest) -> pb.DashboardWorkers:
        answer = workers_page(self.core.whole(), request)
        answer.summary.CopyFrom(self.summary())
        return answer

    @workflow.query(name=DASHBOARD_WORKER_QUERY)
    def dashboard_worker(self, worker_id: str) -> pb.WorkerStatus:
        return worker_status(self.core.whole(), worker_id)

    @workflow.query(name=DASHBOARD_QUEUE_QUERY)
    def dashboard_queue(self) -> pb.DashboardQueue:
        snapshot = self.core.snapshot or self.core.pass_snapshot  # the last pass's, even a pass old
        return queue_page(self.core.whole(), self.summary(), lambda: snapshot or self.autoscale_snapshot())

    @workflow.query(name=AUTOSCALE_SNAPSHOT_QUERY)
    def autoscale_snapshot(self) -> bytes:
        """The compressed SchedulingSnapshot: the healthy, uncordoned workers' free capacity and the queue.

        The autoscaler asks every few seconds; the last pass's encoding is reused until the state changes.
        """
        state = self.core.whole()
        if self.core.snapshot is None:
            self.core.snapshot = self.core.snapshots.encode(state, workflow.now().timestamp())  # leaves the cache be
        return self.core.snapshot
