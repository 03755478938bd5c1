"""What the parts of the scheduler workflow share: its attributes, and the methods one part calls in another.

SchedulerWorkflow mixes in Registration, Queue and Deliveries (one concern per module) over this
base; the workflow class and its parts define the methods, these declarations only let each part
be read (and type-checked) alone. What every part does alike is here: signals take their turn
(`held_in_turn`), and held ones are worked off a bounded amount per workflow task.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from temporalio import workflow

from workflows.scheduler_phase import SchedulerPhase

if TYPE_CHECKING:
    from activities.contracts import Delivery
    from activities.proto import cluster_pb2 as pb
    from workflows.messages import Assigned, Enqueue, Unschedulable
    from workflows.placement_index import Placement
    from workflows.scheduler_carry import StateLoader
    from workflows.scheduler_state import SchedulerState, WorkerEntry
    from workflows.worker_lifecycle import WorkerEvent

F = TypeVar("F", bound=Callable[..., None])


# How much held work (`held_in_turn`: a host registered counts one, any other held signal one) one
# workflow task does; the rest waits for the next task. 1,000 hosts take ~10 ms of the scheduler's CPU.
WORK_PER_TASK = 1_000


def held_in_turn(handler: F) -> F:
    """A signal handler that takes its turn: signals are applied in arrival order, and while some wait, so
    does this one.

    They wait while the run loads its carried state in steps (an enqueue of a job whose entry is not
    loaded yet would be overwritten), while a burst is worked off a bounded amount per workflow task
    (a restarted fleet's registrations; `_work_off_held`), and behind a `configure` that came while
    registration answers were owed (`_reply_barrier`). Counted on arrival.
    """

    @functools.wraps(handler)
    def in_turn(self: SchedulerBase, *args: Any) -> None:
        self._signals_received += 1
        if self._phase is SchedulerPhase.LOADING or self._held or self._reply_barrier:
            self._held.append(functools.partial(handler, self, *args))
            self._dirty = True  # wake the loop: it works them off
            return
        handler(self, *args)

    return cast(F, in_turn)


class SchedulerBase:
    state: SchedulerState
    _dirty: bool  # wake the loop: something changed
    _snapshot: bytes | None  # the last encoded snapshot, until the state changes
    _signals_received: int  # in this run (SIGNAL_BUDGET)
    _replies: list[Delivery]  # registration answers not sent yet
    # A `configure` came while answers were owed: they are sent before any later signal is applied
    # (SchedulerWorkflow.configure explains why).
    _reply_barrier: bool
    _late_deliveries: int  # background deliveries of late assignments not finished yet
    _last_purge: float
    _reports: int  # claims and enqueues received (a scheduler that started empty waits for its tasks' reports)
    _phase: SchedulerPhase  # scheduler_phase: LOADING, REBUILDING, SERVING, CLOSING, HANDED_OVER
    _loader: StateLoader | None  # the carried state still loading (None once whole)
    _handed_over: pb.ClusterSummary | None  # the counts this run handed over as it continued as new (`_let_go`)
    _held: deque[Callable[[], None]]  # signals waiting their turn (`held_in_turn`), oldest first
    _work_task: int  # the workflow task `_work_done` counts in (its history length when it started)
    _work_done: int  # held work done in it

    async def _work_off_held(self) -> None:
        """Apply the held signals, WORK_PER_TASK a workflow task; returns in the task that found none left.

        A burst of signals comes in one workflow task (64 agents' registrations, 6,400 hosts, took
        ~70 ms of the scheduler's CPU and a 223 ms task on a busy controller); signals that come in
        while some wait are held behind them (`held_in_turn`), so the order stays the order of arrival.
        """
        while True:
            while self._held and self._work_left() > 0:
                self._held.popleft()()
                self._spend(1)
            if not self._held:
                return
            await self._pause()

    def _work_left(self) -> int:
        task = workflow.info().get_current_history_length()  # the same all through one workflow task
        if task != self._work_task:
            self._work_task, self._work_done = task, 0
        return WORK_PER_TASK - self._work_done

    def _spend(self, work: int) -> None:
        self._work_left()
        self._work_done += work

    def _changed(self) -> None:
        """The state changed: wake the loop and forget the cached snapshot (SchedulerWorkflow)."""
        raise NotImplementedError

    def _enqueue(self, request: Enqueue) -> None:  # Queue
        raise NotImplementedError

    def _release(self, job_id: str, task_index: int, attempt: int, ran_seconds: float = -1.0) -> None:  # Queue
        raise NotImplementedError

    def _commit(
        self, plan: pb.SchedulingPlan, *, now: float, limit: int | None = None,
        jobs: dict[str, list[pb.SchedulingAssignment]] | None = None, used: dict[str, list[int]] | None = None,
    ) -> list[tuple[str, Assigned, pb.SchedulingAssignment]]:  # Queue  # fmt: skip
        raise NotImplementedError

    def _take_timed_out(self, plan: pb.SchedulingPlan) -> list[tuple[str, Unschedulable]]:  # Queue
        raise NotImplementedError

    def _worker_event(self, worker: WorkerEntry, event: WorkerEvent) -> None:  # Registration
        raise NotImplementedError

    def healthy_worker_count(self) -> int:  # Registration
        raise NotImplementedError

    async def _pause(self) -> None:  # SchedulerWorkflow: the rest in a workflow task of its own
        raise NotImplementedError

    async def _deliver(self, deliveries: list[Delivery]) -> list[int]:  # Deliveries
        raise NotImplementedError

    def _reservations_lost(self, worker_ids: set[str]) -> None:  # Reserving
        raise NotImplementedError

    def _charge_release(self, placement: Placement, ran_seconds: float = -1.0) -> None:  # Sharing
        raise NotImplementedError
