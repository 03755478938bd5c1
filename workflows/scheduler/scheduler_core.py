"""What a scheduler run's parts share: the state, the run's phase, and the signals waiting their turn.

SchedulerWorkflow is a thin shell: its handlers hand each signal and query to one part (the registry,
the queue, sharing, deliveries, reservations), plain objects that each hold this core and call one
another through named methods. Nothing here is a mixin: a part's attributes are its own, and what they
share is spelled out below.

What every part does alike is here too: signals take their turn (`held_in_turn`: behind a `configure` that
came while registration answers were owed), and the run moves through scheduler_phase's table.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.contracts import SCHEDULER_NOT_WHOLE, Delivery
    from activities.proto import cluster_pb2 as pb
    from workflows.scheduler.scheduler_carry import unpack
    from workflows.scheduler.scheduler_phase import SchedulerEvent, SchedulerPhase, transition
    from workflows.scheduler.scheduler_state import SchedulerState
    from workflows.scheduler.snapshot_cache import SnapshotCache

if TYPE_CHECKING:
    from temporalio.workflow import ActivityHandle

F = TypeVar("F", bound=Callable[..., None])

# After asking, how long passes wait for the tasks asked to report (claim their place or enqueue again),
# unless all of them have. A task whose last workflow task ran on the lost controller hears the request
# only once the server gives up on that controller's sticky queue (10 s by default, the SDK's
# `sticky_queue_schedule_to_start_timeout`); at 5 s, a place claimed that late had been given away.
REBUILD_GRACE = timedelta(seconds=15)


class _HasCore(Protocol):
    core: SchedulerCore


def held_in_turn(handler: F) -> F:
    """A part's signal handler that takes its turn: signals are applied in arrival order, and while some
    wait, so does this one.

    They wait behind answers owed before them (`reply_barrier`: those a `configure` came after, or those the last
    run carried), until those answers are sent (`apply_held`). Counted on arrival.
    """

    @functools.wraps(handler)
    def in_turn(self: _HasCore, *args: Any) -> None:
        core = self.core
        core.signals_received += 1
        if core.held or core.reply_barrier:
            core.held.append(functools.partial(handler, self, *args))
            core.dirty = True  # wake the loop: it applies them
            return
        handler(self, *args)

    return cast(F, in_turn)


class SchedulerCore:
    """The run's shared memory: the carried state and what every part reads or wakes."""

    def __init__(self, packed: bytes | None, signal_budget: int) -> None:
        self.held: deque[Callable[[], None]] = deque()  # signals waiting their turn, oldest first
        self.phase = SchedulerPhase.STARTING  # scheduler_phase: moved only by its table (`move`)
        self._state: SchedulerState | None = None
        self.handed_over: pb.ClusterSummary | None = None  # and its counts, as `summary` answers them
        # Loaded whole here (messages: parsed in milliseconds), so signals delivered in the run's first
        # task, which are handled before run() starts, land on the carried state.
        self.state = unpack(packed) if packed else SchedulerState()
        self.move(SchedulerEvent.CARRIED if packed else SchedulerEvent.EMPTY)
        # A carried run's first pass waits for the pass timer (1 s while work waits), not in the task that
        # loaded the state (and, on a fresh controller, imported the workflow into its sandbox).
        self.dirty = False
        self.signals_received = 0  # in this run (the signal budget)
        self.signal_budget = signal_budget
        # Answers owed go out before any later signal is applied: those the last run carried (sent at the loop's
        # first wake, before a pass: not in this task, which loads the state), and those owed when a `configure`
        # came (SchedulerWorkflow.configure says why).
        self.reply_barrier = bool(self.state.replies)
        self.reports = 0  # claims and enqueues received: how many of the tasks asked may have answered
        self.rebuilding: ActivityHandle[dict[str, int]] | None = None  # the fleet asked to report again
        self._rebuilt_at: float | None = None
        # The last encoded snapshot, reused by `autoscale_snapshot` until the state changes.
        self.snapshot: bytes | None = None
        self.pass_snapshot: bytes | None = None  # the last pass's input (the dashboard's queue page)
        # What the last pass's snapshot encoded that the next may reuse (workflow memory only: a function of the state).
        self.snapshots = SnapshotCache()
        self.clock: Callable[[], float] | None = None  # workflow time, unless a test outside a workflow sets one

    @property
    def state(self) -> SchedulerState:
        if self._state is None:  # let go of at continue-as-new (`let_go`), and a query still reached this run
            raise RuntimeError(f"{SCHEDULER_NOT_WHOLE}: this run handed it to the next; ask again")
        return self._state

    @state.setter
    def state(self, value: SchedulerState) -> None:
        self._state = value

    @property
    def replies(self) -> list[Delivery]:
        """Answers owed, not sent yet: part of the state, so a close carries them to the next run."""
        return self.state.replies

    @replies.setter
    def replies(self, value: list[Delivery]) -> None:
        self.state.replies = value

    def whole(self) -> SchedulerState:
        """The state, for a query that answers from all of it (workers, dashboard pages, the autoscaler's snapshot).

        Refused once the run let go of its state (`state`): it used to be unpacked whole for that one answer,
        ~0.4 s at 10,000 workers and 100,000 tasks, up to the SDK's 2 s deadlock detector on a busy controller.
        An Iris client asks again (iris/query_retry.py), and finds the next run, or this one whole.
        """
        return self.state

    def now(self) -> float:
        """Workflow time in seconds (a test outside a workflow sets `clock`)."""
        return workflow.now().timestamp() if self.clock is None else self.clock()

    def changed(self) -> None:
        """The state changed: wake the loop and forget the cached snapshot."""
        self.dirty = True
        self.snapshot = None

    def move(self, event: SchedulerEvent) -> None:
        """The run's phase after `event` (scheduler_phase's table; InvalidTransition fails the task). The
        effects the table names are performed where the event happens."""
        self.phase = transition(self.phase, event).next

    # -- held signals --------------------------------------------------------------------------

    def apply_held(self) -> None:
        """Apply the held signals, oldest first (the barrier that held them is down: `held_in_turn`)."""
        while self.held:
            self.held.popleft()()

    # -- the run's phases ----------------------------------------------------------------------

    def signal_budget_spent(self) -> bool:
        return self.signals_received >= self.signal_budget

    def run_should_end(self) -> bool:
        """The history is long, the signal budget spent, or operators made another build current."""
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or self.signal_budget_spent()
            or info.is_target_worker_deployment_version_changed()
        )

    def rebuild_holds(self) -> bool:
        """No pass while a scheduler that started empty hears from the fleet: a queued task must not
        be put where a running task, whose claim has not come in yet, holds the place. A task with
        nothing to report (it ended, or waits out a retry) leaves the wait to run to REBUILD_GRACE."""
        if self.phase is not SchedulerPhase.REBUILDING:
            return False
        if self._fleet_still_reporting():
            return True
        self.move(SchedulerEvent.REBUILT)
        return False

    def _fleet_still_reporting(self) -> bool:
        assert self.rebuilding is not None, "REBUILDING starts the rebuild activity first"
        if not self.rebuilding.done():
            return True
        if self.rebuilding.exception() is not None:
            return False  # it could not ask: nothing more will come
        if self.reports >= self.rebuilding.result().get("TaskWorkflow", 0):
            return False  # as many reports as tasks asked (a new job's enqueue counts too, so may end it early)
        now = self.now()
        if self._rebuilt_at is None:
            self._rebuilt_at = now
        return now < self._rebuilt_at + REBUILD_GRACE.total_seconds()

    def let_go(self, counts: list[int]) -> None:
        """Drop the state as this run continues as new, so reference counting frees it now, in this task.

        A run's instance ends up in reference cycles (the SDK's event loop, the sandbox's modules), so
        whatever it still holds when it ends waits for the cyclic collector: at 10,000 workers and
        100,000 tasks ~500,000 objects, one collection of ~0.4 s in some later workflow task. A query
        can still reach this run: one that comes while its last workflow task runs waits for that task,
        and the server then hands it to this run, closed (a controller replays the run to answer). It
        answers from the counts handed over (`summary`, the one asked every few seconds, and the healthy
        workers'); any other is refused (`whole`), and an Iris client asks the next run.
        """
        self.move(SchedulerEvent.LET_GO)
        healthy, total, pending, running = counts
        self.handed_over = pb.ClusterSummary(
            store_url=self.state.store_url, healthy_workers=healthy, total_workers=total, pending_tasks=pending,
            running_tasks=running,
        )  # fmt: skip
        self._state = None
        self.snapshots = SnapshotCache()
        self.snapshot = self.pass_snapshot = None
        self.held = deque()
