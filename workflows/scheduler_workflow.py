"""SchedulerWorkflow: the singleton that owns the worker registry and committed capacity.

It wakes at once on submission, registration and completion (signals set a
dirty flag) and on a 1 s timer that is armed only while tasks are pending, so
an idle cluster writes no history. Each pass calls the pure scheduler in an
activity on a compact snapshot, then commits capacity *before* it tells a task
where to run. Every handler is idempotent; state lives in one dataclass
handed to continue-as-new packed (zlib of JSON lines, each a message of scheduler_carry).

Runs are pinned to the controller build that started them (Worker Versioning); when
operators make a new build current, the next workflow task sees it and the run
continues as new onto that build, with its state (see docs/operators.md).

One concern per module: this one holds the loop, the pass and continue-as-new;
scheduler_registration the worker registry and liveness, scheduler_queue the queue
and the commit, scheduler_delivery the signals it sends, scheduler_state the state
it carries (mixed in over scheduler_base).
"""

from __future__ import annotations

import contextlib
import zlib
from collections import deque
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior

# The parts hold workflow code: sandboxed, as this module.
from workflows.scheduler_dashboard import DashboardQueries
from workflows.scheduler_delivery import PASS_HEARTBEAT, Deliveries
from workflows.scheduler_queue import Queue
from workflows.scheduler_registration import Registration
from workflows.scheduler_reservations import RESERVATION_CHECK_SECONDS, Reserving
from workflows.scheduler_sharing import Sharing

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        AUTOSCALE_SNAPSHOT_QUERY,
        AUTOSCALER_WORKFLOW_ID,
        CONFIGURE_SCHEDULER,
        PENDING_REASON,
        REBUILD_SCHEDULER,
        RECENT_ACTIONS_QUERY,
        SCHEDULER_PAUSE,
        WAKE_AUTOSCALER,
        Delivery,
    )
    from activities.proto import cluster_pb2 as pb
    from workflows.scheduler_actions import ActionRow
    from workflows.scheduler_base import held_in_turn
    from workflows.scheduler_carry import Packer, StateLoader, unpack
    from workflows.scheduler_phase import SchedulerEvent, SchedulerPhase, transition
    from workflows.scheduler_state import PendingEntry, SchedulerState
    from workflows.snapshot_cache import SnapshotCache

FIND_ASSIGNMENTS = "find_assignments"  # activities.scheduling.FIND_ASSIGNMENTS, by name
PASS_INTERVAL = timedelta(seconds=1)
# A run also continues as new after SIGNAL_BUDGET received signals, at once (before a pass or during
# one, whose plan is then dropped uncommitted), and sends owed registration replies once before it
# does. The server refuses signals past a per-run limit (`history.maximumSignalsPerExecution`,
# 10,000 by default); senders retry a refused signal and it lands on the new run.
SIGNAL_BUDGET = 2_000  # a fifth of the server's limit: room for what arrives while a run closes
# After asking, how long passes wait for the tasks asked to report (claim their place or enqueue again),
# unless all of them have. A task whose last workflow task ran on the lost controller hears the request
# only once the server gives up on that controller's sticky queue (10 s by default, the SDK's
# `sticky_queue_schedule_to_start_timeout`); at 5 s, a place claimed that late had been given away.
REBUILD_GRACE = timedelta(seconds=15)
# The next run starts on the build that is current then (the run itself is pinned to its own build).
UPGRADE_ON_CONTINUE = workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
# Between two steps of loading the carried state (scheduler_carry) the run awaits a no-op activity: that
# ends the workflow task, so each step is a task of its own (signals that come in meanwhile are held).
PAUSE_TIMEOUT = timedelta(seconds=30)


@workflow.defn(name="SchedulerWorkflow", versioning_behavior=VersioningBehavior.PINNED)
class SchedulerWorkflow(Registration, Queue, Sharing, Deliveries, Reserving, DashboardQueries):
    # What a query may set: `autoscale_snapshot` keeps its own answer until the state changes (no decision
    # reads it). Every other attribute is the same after a query as before (iris/controller/query_guard.py checks).
    QUERY_CACHES = ("_snapshot",)

    @workflow.init
    def __init__(
        self, packed: bytes | None = None, signal_budget: int = SIGNAL_BUDGET,
        reservation_check_seconds: float = RESERVATION_CHECK_SECONDS,
    ) -> None:  # fmt: skip
        # State is taken here, not in run(): signals delivered in a new run's first workflow
        # task are handled before run() starts and must land on the carried-over state. A big state
        # loads in steps (run() takes the rest); signals that come in meanwhile are held until it is whole.
        self._held: deque[Callable[[], None]] = deque()
        self._phase = SchedulerPhase.STARTING  # scheduler_phase: moved only by its table (`_move`)
        self._work_task = -1
        self._work_done = 0
        self._loader: StateLoader | None = StateLoader(packed) if packed else None
        self._state: SchedulerState | None = None
        self._carried = b""  # what this run handed over, once it let go of its state (`_let_go`)
        self._handed_over: pb.ClusterSummary | None = None  # and its counts, as `summary` answers them
        self.state = self._loader.state if self._loader is not None else SchedulerState()
        if self._loader is None:
            self._move(SchedulerEvent.EMPTY)
        elif self._loader.small:  # a big one is loaded by run(), a step per task
            while not self._loader.step():
                pass
            self._loader = None
            self._move(SchedulerEvent.CARRY_SMALL)
        else:
            self._move(SchedulerEvent.CARRY_BIG)
        self._rebuilding: workflow.ActivityHandle[dict[str, int]] | None = None
        self._rebuilt_at: float | None = None
        self._reports = 0  # claims and enqueues received: how many of the tasks asked may have answered
        self._dirty = packed is not None
        self._late_deliveries = 0  # background deliveries of late assignments not finished yet
        self._signals_received = 0
        self._signal_budget = signal_budget  # an argument, so a test can make it small (the sandbox re-imports us)
        self._reservation_check = reservation_check_seconds  # likewise
        self._replies: list[Delivery] = []  # registration answers not sent yet
        self._reply_barrier = False  # `configure`: the answers owed go out before later signals apply
        self._last_purge = 0.0
        # The last encoded snapshot, reused by `autoscale_snapshot` until the state changes.
        self._snapshot: bytes | None = None
        # The pieces of the last pass's snapshot (workflow memory only: a pure function of the state).
        self._pieces = SnapshotCache()
        self._told_bands: dict[str, str] = {}
        self._published_users: list[list[object]] | None = None
        self._users_published_at = 0.0
        self._queue_entries: list[pb.QueueEntry] = []  # the last plan's queue (positions, estimates): not carried
        self._published_teams: tuple[list[list[object]], list[list[object]]] | None = None

    @workflow.run
    async def run(
        self, packed: bytes | None = None, signal_budget: int = SIGNAL_BUDGET,
        reservation_check_seconds: float = RESERVATION_CHECK_SECONDS,
    ) -> None:  # fmt: skip
        if self._phase is SchedulerPhase.LOADING:
            await self._load_rest()
        if self._phase is SchedulerPhase.REBUILDING:
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
                    lambda: self._dirty or bool(self._replies),  # answers owed: state, not a flag (_send_replies)
                    timeout=PASS_INTERVAL if self._work_waits() else self._idle_timer(),
                )
            self._dirty = False
            if self._reply_barrier:  # answers owed before a `configure`, before what came after it
                await self._send_replies()
            if self._held:
                await self._work_off_held()
            if self._work_waits() and not self._signal_budget_spent() and not self._rebuild_holds():
                await self._scheduling_pass()
            if self._replies:
                await self._send_replies()
            self._purge_lost()
            self._check_reserving_jobs()
            self._publish_reservations()
            self.state.books.expire(workflow.now().timestamp(), self.state.pending)
            self._publish_users()
            if self._run_should_end():
                self._move(SchedulerEvent.RUN_SHOULD_END)
                await workflow.wait_condition(
                    lambda: workflow.all_handlers_finished()
                    and self._late_deliveries == 0  # their places are given back by this run
                )
                await self._work_off_held()
                # One round: while 10,000 agents register, every round brings new registrations,
                # and waiting for the last one let a run pass the server's signal limit. An
                # agent without its answer registers again (idempotent) and the next run answers.
                if self._replies:
                    await self._send_replies()
                if self._replies:
                    workflow.logger.info("%d registrations answered by the next run", len(self._replies))
                self._purge_lost(force=True)
                # Packed over several workflow tasks while signals still come in (scheduler_carry.Packer).
                packer = Packer(self.state)
                while not packer.step():
                    await self._pause()
                if packer.steps > 1:  # a big state: what changed meanwhile, and the header, in a task of their own
                    await self._pause()
                await self._work_off_held()  # what came in meanwhile and waits: this run applies it
                packed = packer.finish(self.state)
                counts = packer.counts
                del packer
                self._let_go(packed, counts)
                workflow.continue_as_new(
                    args=[packed, self._signal_budget, self._reservation_check],
                    initial_versioning_behavior=UPGRADE_ON_CONTINUE,
                )

    @property
    def state(self) -> SchedulerState:
        if self._state is None:  # let go of at continue-as-new (`_let_go`), and a query still reached this run:
            return unpack(self._carried)  # unpacked for that answer alone (a query changes nothing it finds)
        return self._state

    @state.setter
    def state(self, value: SchedulerState) -> None:
        self._state = value

    def _let_go(self, packed: bytes, counts: list[int]) -> None:
        """Drop the state as this run continues as new, so reference counting frees it now, in this task.

        A run's instance ends up in reference cycles (the SDK's event loop, the sandbox's modules), so
        whatever it still holds when it ends waits for the cyclic collector: at 10,000 workers and
        100,000 tasks ~500,000 objects, one collection of ~0.4 s in some later workflow task. A query
        can still reach this run: one that comes while its last workflow task runs waits for that task,
        and the server then hands it to this run, closed (a controller replays the run to answer). It
        gets the state back from what was packed, as it was handed over; `summary`, the one asked every
        few seconds (metrics, dashboard), answers the counts handed over, without unpacking (0.1-0.3 s).
        """
        self._move(SchedulerEvent.LET_GO)
        self._carried = packed
        healthy, total, pending, running = counts
        self._handed_over = pb.ClusterSummary(
            store_url=self.state.store_url, healthy_workers=healthy, total_workers=total, pending_tasks=pending,
            running_tasks=running,
        )
        self._state = None
        self._pieces = SnapshotCache()
        self._snapshot = self._pass_snapshot = None
        self._held = deque()

    async def _load_rest(self) -> None:
        """Load the carried state a step per workflow task, then apply the signals held meanwhile."""
        assert self._loader is not None
        while True:  # not in the first task: it also imports the workflow's modules into a fresh sandbox
            await self._pause()
            if self._loader.step():
                break
        workflow.logger.info("carried state loaded in %d workflow tasks", self._loader.steps)
        self._loader = None
        self._move(SchedulerEvent.LOADED)
        await self._work_off_held()
        await self._pause()  # the first pass in a task of its own

    async def _pause(self) -> None:
        await workflow.execute_activity(SCHEDULER_PAUSE, start_to_close_timeout=PAUSE_TIMEOUT)

    def _run_should_end(self) -> bool:
        """The history is long, the signal budget spent, or operators made another build current."""
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or self._signal_budget_spent()
            or info.is_target_worker_deployment_version_changed()
        )

    def _move(self, event: SchedulerEvent) -> None:
        """The run's phase after `event` (scheduler_phase's table; InvalidTransition fails the task). The
        effects the table names are performed where the event happens, in this module."""
        self._phase = transition(self._phase, event).next

    def _rebuild_holds(self) -> bool:
        """No pass while a scheduler that started empty hears from the fleet: a queued task must not
        be put where a running task, whose claim has not come in yet, holds the place. A task with
        nothing to report (it ended, or waits out a retry) leaves the wait to run to REBUILD_GRACE."""
        if self._phase is not SchedulerPhase.REBUILDING:
            return False
        if self._fleet_still_reporting():
            return True
        self._move(SchedulerEvent.REBUILT)
        return False

    def _fleet_still_reporting(self) -> bool:
        assert self._rebuilding is not None, "REBUILDING starts the rebuild activity first"
        if not self._rebuilding.done():
            return True
        if self._rebuilding.exception() is not None:
            return False  # it could not ask: nothing more will come
        if self._reports >= self._rebuilding.result().get("TaskWorkflow", 0):
            return False  # as many reports as tasks asked (a new job's enqueue counts too, so may end it early)
        now = workflow.now().timestamp()
        if self._rebuilt_at is None:
            self._rebuilt_at = now
        return now < self._rebuilt_at + REBUILD_GRACE.total_seconds()

    def _idle_timer(self) -> timedelta | None:
        """With no pass due: wake for the reservations' checks, or for a user table whose publication waits."""
        timers = [t for t in (self._reservation_timer(), self._users_publish_timer()) if t is not None]
        return min(timers) if timers else None

    def _work_waits(self) -> bool:
        """Tasks wait for a place, or a reservation for its workers: passes are due (and the 1 s timer armed).

        A throttled array's tasks held back by its own cap (scheduler/throttle.py) do not count: only one of
        its tasks ending, which wakes the loop anyway, can change that; a long array at its cap arms no timer.
        """
        return any(map(self._may_place, self.state.pending.values())) or self._reservations_waiting()

    def _may_place(self, entry: PendingEntry) -> bool:
        """Whether a pass could place any of this job's pending tasks (not when it is at its max_concurrent)."""
        cap = entry.spec.max_concurrent
        return not cap or len(self.state.placements.jobs.get(entry.job_id) or ()) < cap

    def _signal_budget_spent(self) -> bool:
        return self._signals_received >= self._signal_budget

    # -- the pass ----------------------------------------------------------------------------

    def _changed(self) -> None:
        """The state changed: wake the loop and forget the cached snapshot."""
        self._dirty = True
        self._snapshot = None

    async def _scheduling_pass(self) -> None:
        self._snapshot = self._pass_snapshot = snapshot = await self._encode_snapshot()
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
        await workflow.wait_condition(lambda: passing.done() or self._signal_budget_spent())
        if not passing.done():
            workflow.logger.info("signal budget spent during a pass: continuing as new before it ends")
            return
        plan_bytes = await passing
        await self._work_off_held()  # what came in during the pass, held behind a burst, before the plan is read
        plan = pb.SchedulingPlan.FromString(zlib.decompress(plan_bytes))
        if plan.assignments or plan.timed_out:
            self._snapshot = None
        self._queue_entries = list(plan.queue)
        self._take_holds(plan)  # before the commit: the plan may place a tree's tasks in what it holds
        evictions = self._take_evictions(plan)  # before the commit: a preemptor waits for its victims
        await self._announce(plan)
        told = evictions + self._tell_bands(plan)
        if told:
            await self._deliver(told)
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
            await self._deliver(changed)

    async def _encode_snapshot(self) -> bytes:
        """The pass's snapshot from the pieces the last pass left (snapshot_cache). What is left to encode
        is done a step per workflow task: one for a warm cache, several for a cold one (a new run)."""
        build = self._pieces.build(self.state, workflow.now().timestamp())
        while not build.step():
            await self._pause()
        return build.result()

    # -- handlers ------------------------------------------------------------------------------

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
        if self._replies:
            self._reply_barrier = True

    @workflow.query(name=RECENT_ACTIONS_QUERY)
    def recent_actions(self) -> list[ActionRow]:
        """The scheduler's last actions (workflows/scheduler_actions.py), oldest first: a few KB."""
        return list(self.state.actions)

    @workflow.query(name=AUTOSCALE_SNAPSHOT_QUERY)
    def autoscale_snapshot(self) -> bytes:
        """zlib(SchedulingSnapshot): the healthy, uncordoned workers' free capacity and the queue.

        The autoscaler asks every few seconds; the last pass's encoding is reused until the state changes.
        """
        if self._phase is SchedulerPhase.LOADING:
            raise RuntimeError("the scheduler is loading its carried state: ask again in a moment")
        if self._snapshot is None:
            self._snapshot = self._pieces.encode(self.state, workflow.now().timestamp())  # leaves the cache be
        return self._snapshot
