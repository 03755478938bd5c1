"""How a scheduler run ends: it waits for a quiet turn, packs its state and continues as new.

A part of SchedulerWorkflow, as the registry and the queue are (scheduler_workflow says what a part is).

The server refuses to close a run when a signal came in during the task that closes it (UNHANDLED_COMMAND), and
the SDK then replays the whole run inside the task it redoes: 1-2.5 s at 30,000 workers, where enqueue batches
come every 5-15 ms in a storm and the pack takes up to ~100 ms. So a run that should end serves on until QUIET_WINDOW
passes without a signal (`quiet`), and packs in the task that timer starts, before any pass (so no
commit shares it); a large state closes in the next task, which does nothing else (`close`): the one timer left
here, kept because the server has no way to hand a signal that comes during a close to the next run
(temporalio/temporal#1289). docs/performance.md, "A close that waits for a quiet turn" and "A close on a wake of
its own".
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, NoReturn

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
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
# A run that should end closes once this passes without a signal (its loop's wait: a workflow task of its own), at
# most CLOSE_WAIT_SECONDS after it should have ended (passes go on meanwhile, at most one a second: ~1 MB of
# history each at 30,000 workers); at once when its signal budget is spent. With the pass interval here (1 s) every
# close stood scheduling still a second longer: 64-67 s to place 300,000 tasks, against 53-54 s.
QUIET_WINDOW = timedelta(milliseconds=50)
CLOSE_WAIT_SECONDS = 10.0
# From this many carried workers and tasks (a pack of ~10 ms; 330,000 take ~100 ms) the pack has a workflow task of
# its own, between two timers this long, and the close follows in the next task; at most this many packs when
# signals keep coming.
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

    @property
    def waiting(self) -> bool:
        """The run should have ended and waits for a quiet turn: its loop wakes at least every pass interval."""
        return self.should_end_since is not None

    def begin_wait(self) -> None:
        """The run should end: its wait for a quiet turn starts at the first call (later calls change nothing)."""
        if self.should_end_since is None:
            self.should_end_since = self.core.now()

    def quiet(self, arrived: int) -> bool:
        """Whether a run that waits to close closes on this wake: no signal came in while it waited (`arrived`:
        QUIET_WINDOW passed), or it waited CLOSE_WAIT_SECONDS of workflow time, or its signal budget is spent (the
        budget keeps a run far below the server's 10,000 signals: a storm must not push it past; 50 MB of history
        stays far off too).

        The loop asks only on a wake of this kind, a task of its own (a signal's or the timer's), and before any
        pass: so the close never shares a task with a plan's commit (50-80 ms of CPU at 30,000 workers).
        """
        core, since = self.core, self.should_end_since
        waited = 0.0 if since is None else core.now() - since
        return arrived == 0 or waited >= CLOSE_WAIT_SECONDS or core.signal_budget_spent()

    async def close(self) -> NoReturn:
        """Continue as new with the state packed; a large state packed in a workflow task of its own.

        From CLOSE_SPLIT_AT carried workers and tasks the pack ends its task with a short timer and the close
        follows in the next task; what came in meanwhile makes the pack stale: applied, and packed again
        (`STALE`), for up to CLOSE_ROUNDS packs, the last closing in the task that packed it. A small state packs in
        milliseconds and closes in the same task (more rounds would only let a storm into the closing run longer).
        """
        core = self.core
        core.move(SchedulerEvent.RUN_SHOULD_END)
        await self._settled()
        core.apply_held()
        # One round: while 10,000 agents register, every round brings new registrations,
        # and waiting for the last one let a run pass the server's signal limit. An
        # agent without its answer registers again (idempotent) and the next run answers.
        if core.replies:
            await self.deliveries.send_replies()
        if core.replies:
            workflow.logger.info("%d registrations answered by the next run", len(core.replies))
        last_round = CLOSE_ROUNDS if carried_items(core.state) >= CLOSE_SPLIT_AT else 1
        for rounds in range(1, last_round + 1):
            core.apply_held()  # what came in meanwhile and waits: this run applies it
            # Packed after the last held signal: its messages serialized (scheduler_carry).
            self.registry.purge_lost(force=True)
            packed = command_input(lambda: pack(core.state), b"")  # replayed: the next run has it
            if rounds == last_round:
                break
            received = core.signals_received
            await workflow.sleep(self.close_seconds)
            if core.signals_received == received and not core.held:
                break
            core.move(SchedulerEvent.STALE)
            await self._settled()
        core.let_go(counts(core.state))
        workflow.continue_as_new(
            args=[packed, core.signal_budget, self.reserving.check_seconds, self.close_seconds],
            initial_versioning_behavior=UPGRADE_ON_CONTINUE,
        )

    async def _settled(self) -> None:
        """Until no handler runs and no delivery is late (their places are given back by this run)."""
        await workflow.wait_condition(lambda: workflow.all_handlers_finished() and self.deliveries.late == 0)
