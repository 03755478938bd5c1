"""How a scheduler run ends: it waits for a quiet moment, packs its state, and hands it over after another.

A part of SchedulerWorkflow, as the registry and the queue are (scheduler_workflow says what a part is).

The server refuses to close a run when a signal came in during the task that closes it (UNHANDLED_COMMAND), and
the SDK then replays the whole run inside the task it redoes: 1-2.5 s at 30,000 workers, where enqueue batches
come every 5-15 ms in a storm. The server has no way to hand such a signal to the next run instead
(temporalio/temporal#1289), so the close is a short task that nothing came in before:

- a run that should end serves on until its wait for a signal times out (QUIET_SECONDS, 50 ms), and packs its
  state in the task that timer starts, before any pass: no plan's commit shares that task;
- it hands the pack over on the next wake if no signal came in meanwhile, in a task that does nothing else. That
  wait is as short as the server allows (`close_seconds`, 1 ms): the pack's task must be recorded first, or the
  close would hold the pack's ~100 ms at 30,000 workers, and every millisecond more lets more signals in first. A
  signal first makes the pack stale: applied, and packed again (`STALE`), at most CLOSE_ROUNDS packs, the last
  handed over in the task that packed it;
- a small state (under CLOSE_SPLIT_AT carried workers and tasks) packs in milliseconds and hands over at once.

Both waits are the loop's own wait for a signal (SchedulerWorkflow.run). docs/performance.md, "A close that waits
for a quiet turn" and "A close on a wake of its own".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.memo import memo_now
    from workflows.scheduler.replayed_inputs import command_input
    from workflows.scheduler.scheduler_carry import carried_items, counts, pack
    from workflows.scheduler.scheduler_phase import SchedulerEvent

if TYPE_CHECKING:
    from workflows.scheduler.scheduler_core import SchedulerCore
    from workflows.scheduler.scheduler_delivery import Deliveries
    from workflows.scheduler.scheduler_registration import Registry
    from workflows.scheduler.scheduler_reservations import Reserving

# The next run starts on the build that is current then (the run itself is pinned to its own build).
UPGRADE_ON_CONTINUE = workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
# A run that should end packs once this passes without a signal (its loop's wait: a workflow task of its own), at
# most CLOSE_WAIT_SECONDS after it should have ended (passes go on meanwhile, at most one a second: ~1 MB of
# history each at 30,000 workers); at once when its signal budget is spent. With the pass interval here (1 s) every
# close stood scheduling still a second longer: 64-67 s to place 300,000 tasks, against 53-54 s.
QUIET_SECONDS = 0.05
CLOSE_WAIT_SECONDS = 10.0
# From this many carried workers and tasks (a pack of ~10 ms; 330,000 take ~100 ms) a pack is handed over in a task
# of its own, after a wait this long for a signal (a run argument, so a test's may be longer; carried to the next
# run); at most this many packs when signals keep coming. Waiting QUIET_SECONDS here instead, a stream of a signal
# every 50 ms or faster would make every close pack three times and hand over in the third pack's task.
CLOSE_SPLIT_AT = 20_000
CLOSE_SECONDS = 0.001
CLOSE_ROUNDS = 3


class Closing:
    """When the run closes, and the close itself."""

    def __init__(
        self, core: SchedulerCore, registry: Registry, reserving: Reserving, deliveries: Deliveries,
        close_seconds: float = CLOSE_SECONDS,
    ) -> None:  # fmt: skip
        self.core = core
        self.registry = registry
        self.reserving = reserving
        self.deliveries = deliveries
        self.close_seconds = close_seconds  # CLOSE_SECONDS, or a test's (a run argument, carried to the next run)
        self.should_end_since: float | None = None  # workflow time the run first should have ended
        self.packed: bytes | None = None  # the state packed on a quiet wake, handed over if the next is quiet too
        self.packs = 0

    @property
    def waiting(self) -> bool:
        """The run should have ended: its loop waits for a signal or `wait_seconds` and asks `on_wake`."""
        return self.should_end_since is not None

    def wait_seconds(self) -> float:
        """How long the closing run's loop waits for a signal: for a quiet moment, or, packed, for its task's end."""
        return QUIET_SECONDS if self.packed is None else self.close_seconds

    def begin_wait(self) -> None:
        """The run should end: its wait for a quiet moment starts at the first call (later calls change nothing)."""
        if self.should_end_since is None:
            self.should_end_since = self.core.now()

    def quiet(self, arrived: int) -> bool:
        """Whether a run that waits to close packs on this wake: no signal came in while it waited (`arrived`:
        QUIET_SECONDS passed), or it waited CLOSE_WAIT_SECONDS of workflow time, or its signal budget is spent (the
        budget keeps a run far below the server's 10,000 signals: a storm must not push it past; 50 MB of history
        stays far off too).

        The loop asks only on a wake of this kind, a task of its own (a signal's or the timer's), and before any
        pass: so a pack never shares a task with a plan's commit (50-80 ms of CPU at 30,000 workers).
        """
        core, since = self.core, self.should_end_since
        waited = 0.0 if since is None else core.now() - since
        return arrived == 0 or waited >= CLOSE_WAIT_SECONDS or core.signal_budget_spent()

    async def on_wake(self, arrived: int) -> bool:
        """A closing run's wake (`arrived` signals came in while it waited): hand the state over, or pack it and
        wait again (True: the loop goes straight back to its wait, as a pass would make the pack stale), or serve
        on (False: not quiet yet, nothing packed)."""
        core = self.core
        if self.packed is not None:
            if arrived == 0 and not core.held:
                self._hand_over(self.packed)
            core.move(SchedulerEvent.STALE)  # what came in is applied, and packed again at once
        elif self.quiet(arrived):
            core.move(SchedulerEvent.RUN_SHOULD_END)
        else:
            return False
        await self._settled()
        core.apply_held()
        # Answered in the first round only: while 10,000 agents register, every round brings new registrations, and
        # waiting for the last one let a run pass the server's signal limit. Answers still owed are carried: the
        # next run sends them before it applies anything else (a registration answered by no run left its agent
        # waiting to register again).
        if core.replies and self.packs == 0:
            await self.deliveries.send_replies()
            if core.replies:
                workflow.logger.info("%d registrations answered by the next run", len(core.replies))
            core.apply_held()
        # Packed after the last held signal: its messages serialized (scheduler_carry).
        self.registry.purge_lost(force=True)
        packed = command_input(lambda: pack(core.state), b"")  # replayed: the next run has it
        self.packs += 1
        if self.packs >= CLOSE_ROUNDS or carried_items(core.state) < CLOSE_SPLIT_AT:
            self._hand_over(packed)
        self.packed = packed
        return True

    def _hand_over(self, packed: bytes) -> NoReturn:
        """Let the state go and continue as new with it packed.

        A pack made in an earlier task is empty when that task was replayed (`command_input`: a controller restarted
        between the two, or one that keeps no run in its cache): it is made again now, from the same state (nothing
        came in since). Handing over the empty pack left the next run with nothing, to rebuild from the fleet.
        """
        core = self.core
        if not packed:
            packed = command_input(lambda: pack(core.state), b"")
        core.let_go(counts(core.state))
        workflow.continue_as_new(
            args=[packed, core.signal_budget, self.reserving.check_seconds, self.close_seconds],
            memo=memo_now(),  # the published tables as they are now, not as this run started (workflows/memo.py)
            initial_versioning_behavior=UPGRADE_ON_CONTINUE,
        )

    async def _settled(self) -> None:
        """Until no handler runs and no delivery is late (their places are given back by this run)."""
        await workflow.wait_condition(lambda: workflow.all_handlers_finished() and self.deliveries.late == 0)
