"""What the parts of the scheduler workflow share: its attributes, and the methods one part calls in another.

SchedulerWorkflow mixes in Registration, Queue and Deliveries (one concern per module) over this
base; the workflow class and its parts define the methods, these declarations only let each part
be read (and type-checked) alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from activities.contracts import Delivery
    from activities.proto import cluster_pb2 as pb
    from workflows.messages import Assigned, Enqueue, Unschedulable
    from workflows.scheduler_carry import StateLoader
    from workflows.scheduler_state import Placement, SchedulerState, WorkerEntry
    from workflows.worker_lifecycle import WorkerEvent

F = TypeVar("F", bound=Callable[..., None])


def held_while_loading(handler: F) -> F:
    """A signal handler that waits, in arrival order, while the run loads its carried state in steps.

    Before the state is whole a handler would act on part of it (an enqueue of a job whose entry is not
    loaded yet would be overwritten); the run applies what it held once the last chunk is in.
    """

    @functools.wraps(handler)
    def held(self: SchedulerBase, *args: Any) -> None:
        if self._loader is not None:
            self._held.append(functools.partial(handler, self, *args))
            return
        handler(self, *args)

    return cast(F, held)


class SchedulerBase:
    state: SchedulerState
    _dirty: bool  # wake the loop: something changed
    _snapshot: bytes | None  # the last encoded snapshot, until the state changes
    _signals_received: int  # in this run (SIGNAL_BUDGET)
    _replies: list[Delivery]  # registration answers not sent yet
    _late_deliveries: int  # background deliveries of late assignments not finished yet
    _last_purge: float
    _loader: StateLoader | None  # the carried state still loading (None once whole)
    _held: list[Callable[[], None]]  # signals that came in while it loads, applied after

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

    async def _deliver(self, deliveries: list[Delivery], *, urgent: bool) -> list[int]:  # Deliveries
        raise NotImplementedError

    def _reservations_lost(self, worker_ids: set[str]) -> None:  # Reserving
        raise NotImplementedError

    def _charge_release(self, placement: Placement, ran_seconds: float = -1.0) -> None:  # Sharing
        raise NotImplementedError
