"""The scheduler workflow's reservations: held for a job's tree from its RESERVE to its RELEASE_RESERVATION.

The pure scheduler decides where a reservation is held and what its tree may use
(scheduler/reservations.py); this part keeps them in the state (carried over continue-as-new by
`pack`), takes a pass's new holds that still fit, moves the entries of a lost worker back to
waiting for a replacement, and publishes the reservations in the scheduler's memo whenever what
it shows changes, so `iris reservation list` reads them without querying the singleton.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.contracts import FIND_ENDED_JOBS, RESERVATIONS_MEMO, reservation_id_of
    from activities.proto import cluster_pb2 as pb
    from workflows.messages import Reserve
    from workflows.scheduler.reservation_state import apply_holds, from_request, lose_workers, view
    from workflows.scheduler.scheduler_core import SchedulerCore, held_in_turn

_UNREAD = object()
# How often the scheduler asks whether the jobs it holds reservations for still run: a job terminated
# from outside cannot release its own (its end normally does).
RESERVATION_CHECK_SECONDS = 60.0
USAGE_PUBLISH_SECONDS = 5.0


def _outline(shown: Any) -> list[Any]:
    """What the published reservations show apart from their trees' use."""
    return [
        [r["id"], r["state"], r["held"], r["reason"], r["lost"], [w["worker"] for w in r["workers"]]]
        for r in shown or []
    ]


class Reserving:
    """The scheduler's reservations (a part of SchedulerWorkflow: scheduler_core says how the parts meet)."""

    def __init__(self, core: SchedulerCore, check_seconds: float = RESERVATION_CHECK_SECONDS) -> None:
        self.core = core
        self.check_seconds = check_seconds  # RESERVATION_CHECK_SECONDS, or a test's
        self._published_reservations: Any = _UNREAD  # what the memo shows (read from it once per run)
        self._published_at = 0.0
        self._publish_owed = False  # a change of the trees' use waits for USAGE_PUBLISH_SECONDS
        self._jobs_checked_at: float | None = None
        self._job_check: workflow.ActivityHandle[list[str]] | None = None

    @held_in_turn
    def reserve(self, request: Reserve) -> None:
        """Hold a job's reservation for its tree; idempotent (a job has one reservation)."""
        reservation_id = reservation_id_of(request.job_id)
        if reservation_id in self.core.state.reservations or not request.entries:
            return
        self.core.state.reservations[reservation_id] = from_request(request, reservation_id, self.core.now())
        self.core.changed()

    @held_in_turn
    def release_reservation(self, job_id: str) -> None:
        """The reserving job ended: its capacity goes back to the pool for the next pass. Idempotent."""
        self._release_reservation(job_id)

    def _release_reservation(self, job_id: str) -> None:
        if self.core.state.reservations.pop(reservation_id_of(job_id), None) is not None:
            self.core.changed()

    def reservations_waiting(self) -> bool:
        """Some reservation has an entry not held (waiting, or its worker was lost): a pass is due."""
        return any(len(r.held) < len(r.entries) for r in self.core.state.reservations.values())

    def reservations_lost(self, worker_ids: set[str]) -> None:
        """Entries held on lost or removed workers wait for a replacement."""
        if self.core.state.reservations and lose_workers(self.core.state, worker_ids):
            self.core.changed()

    def take_holds(self, plan: pb.SchedulingPlan) -> None:
        """Take a pass's new holds that still fit the state now (before its assignments are committed)."""
        if (plan.reservation_holds or plan.reservation_reasons) and apply_holds(self.core.state, plan, self.core.now()):
            self.core.snapshot = None

    def publish_reservations(self) -> None:
        """Upsert the scheduler's memo when what it shows of the reservations changed (no event otherwise)."""
        if self._published_reservations is _UNREAD:
            self._published_reservations = workflow.memo_value(RESERVATIONS_MEMO, default=None)
        if not self.core.state.reservations and not self._published_reservations:
            return
        shown = view(self.core.state)
        if shown == self._published_reservations:
            return
        # What a tree uses changes with every task it starts and ends: that alone is published at most
        # every USAGE_PUBLISH_SECONDS (each upsert is an event carrying the whole memo); anything else
        # (a reservation held, lost, released, its reason) at once.
        now = self.core.now()
        same = _outline(shown) == _outline(self._published_reservations)
        if same and now < self._published_at + USAGE_PUBLISH_SECONDS:
            self._publish_owed = True  # the loop wakes for it (`_reservation_timer`)
            return
        self._published_reservations, self._published_at, self._publish_owed = shown, now, False
        workflow.upsert_memo({RESERVATIONS_MEMO: shown})

    def reservation_timer(self) -> timedelta | None:
        """While reservations are held, wake now and then to check that their jobs still run (or to publish)."""
        if self._publish_owed:
            return timedelta(seconds=USAGE_PUBLISH_SECONDS)
        return timedelta(seconds=self.check_seconds) if self.core.state.reservations else None

    def check_reserving_jobs(self) -> None:
        """Every RESERVATION_CHECK_SECONDS, ask (in the background) which reserving jobs ended; release theirs."""
        now = self.core.now()
        if self._jobs_checked_at is None or not (self.core.state.reservations or self._job_check):
            self._jobs_checked_at = now  # the first check comes one interval after a reservation arrives
        check = self._job_check
        if check is not None:
            if not check.done():
                return
            self._job_check, self._jobs_checked_at = None, now
            if check.exception() is not None:
                workflow.logger.warning("could not check reserving jobs: %s", check.exception())
                return
            for job_id in check.result():
                if reservation_id_of(job_id) in self.core.state.reservations:
                    workflow.logger.warning("job %s ended without releasing its reservation: released", job_id)
                    self._release_reservation(job_id)
            return
        if self.core.state.reservations and now - self._jobs_checked_at >= self.check_seconds:
            jobs = [r.job_id for r in self.core.state.reservations.values()]
            self._job_check = workflow.start_activity(
                FIND_ENDED_JOBS, jobs, result_type=list[str], start_to_close_timeout=timedelta(seconds=60),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=3),
            )  # fmt: skip
            self._job_check.add_done_callback(self._wake_after_check)

    def _wake_after_check(self, _: object) -> None:
        self.core.dirty = True
