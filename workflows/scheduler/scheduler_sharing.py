"""The scheduler workflow's sharing part: it carries out a plan's evictions, keeps the books, publishes users.

The pure scheduler decides (bands, demotion, fair share, victims: `scheduler.sharing`,
`scheduler.preemption`); this part only carries the plan out:

- An eviction becomes a hold for its preemptor (`sharing_state.Hold`) and an `evict`
  signal to every victim attempt. The victim's task cancels its run_task, so its
  process gets SIGTERM and, after the cluster's grace, SIGKILL; the task counts a
  preemption and goes back to the queue with its band. The preemptor's own
  assignments in that plan are not committed: it waits, outside the passes, with
  the workers it was planned on held for it, until its victims have released
  their places; the next pass then places it there first.
- Releases are charged (see `sharing_state.Books.charge`).
- A demoted job is told the band it is scheduled in (`effective_band`), once per change.
- The user table is published in the scheduler's memo for `iris user list`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.contracts import EFFECTIVE_BAND, EVICT, Delivery, task_workflow_id
    from activities.proto import cluster_pb2 as pb
    from scheduler.spot import CAPACITY_ATTRIBUTE
    from workflows.fleet.worker_lifecycle import WorkerState
    from workflows.messages import Evict, SetCredits
    from workflows.scheduler.placement_index import Placement
    from workflows.scheduler.scheduler_core import SchedulerCore, held_in_turn
    from workflows.scheduler.sharing_state import (
        DEFAULT_CREDITS_MEMO,
        USERS_MEMO,
        SharingSettings,
        release_charge,
        take_evictions,
        users_memo,
    )
    from workflows.scheduler.teams_memo import QUEUE_MEMO, TEAMS_MEMO, queue_memo, teams_memo


PUBLISH_INTERVAL = 5.0  # seconds between two publications of the user table while work is queued


class Sharing:
    """The scheduler's books and what it tells of them (a part of SchedulerWorkflow: scheduler_core says how
    the parts meet)."""

    def __init__(self, core: SchedulerCore) -> None:
        self.core = core
        self._told_bands: dict[str, str] = {}  # job id -> the effective band it was last told (not carried)
        self._published_users: list[list[object]] | None = None
        self._users_published_at = 0.0
        self._users_owed = False  # a change of the user table waits for PUBLISH_INTERVAL
        self.queue_entries: list[pb.QueueEntry] = []  # the last plan's queue (positions, estimates): not carried
        self._published_teams: tuple[list[list[object]], list[list[object]]] | None = None
        self._published_default: float | None = None

    @held_in_turn
    def configure_sharing(self, settings: SharingSettings) -> None:
        self.core.state.books.configure(settings)
        self.core.changed()

    @held_in_turn
    def set_credits(self, request: SetCredits) -> None:
        """An operator's call: the user's remaining balance; a bad amount is dropped with a warning."""
        try:
            self.core.state.books.set_credits(request.user, request.amount)
        except ValueError as err:
            workflow.logger.warning("set_credits for %s dropped: %s", request.user, err)
            return
        self.core.changed()

    @held_in_turn
    def headroom(self, rows: list[list[Any]]) -> None:
        """What each scale group can still bring (from the autoscaler, when it changes)."""
        self.core.state.books.headroom = rows
        self.core.changed()

    def charge_release(self, placement: Placement, ran_seconds: float = -1.0) -> None:
        """Charge the attempt whose place is given back, and let a hold waiting for it move on."""
        now = self.core.now()
        worker = self.core.state.workers.get(placement.worker_id)
        capacity = str(worker.attributes.get(CAPACITY_ATTRIBUTE, "")) if worker is not None else ""
        self.core.state.books.charge([release_charge(placement, now, ran_seconds, capacity)])
        ran = ran_seconds if ran_seconds >= 0 else now - placement.placed_at
        if ran > 0 and placement.placed_at > 0:
            self.core.state.books.recent.append(ran)  # the queue's estimates learn how long work runs
        key = task_workflow_id(placement.job_id, placement.task_index)
        self.core.state.books.released(key, placement.attempt)

    def take_evictions(self, plan: pb.SchedulingPlan) -> list[Delivery]:
        """Turn the plan's evictions into holds and `evict` signals; drop the preemptors' assignments."""
        stops = take_evictions(self.core.state.books, self.core.state, plan, self.core.now())
        for e in plan.evictions:
            workflow.logger.info("evicting %d %s tasks of %s for %s", len(e.task_indices), e.band, e.job_id,
                                 e.preemptor)  # fmt: skip
        if plan.evictions:
            self.core.snapshot = None
        grace = self.core.state.books.settings.preemption_grace_seconds
        return [Delivery(key, EVICT, Evict(attempt, reason, grace)) for key, attempt, reason in stops]

    def tell_bands(self, plan: pb.SchedulingPlan) -> list[Delivery]:
        """Tell each demoted (or restored) job the band it is scheduled in, once per change."""
        out = []
        for job_id, band in plan.effective_bands.items():  # demoted, placed in this pass or still pending
            if self._told_bands.get(job_id) != band:
                out.append(Delivery(job_id, EFFECTIVE_BAND, band))
                self._told_bands[job_id] = band
        for job_id in list(self._told_bands):
            entry = self.core.state.pending.get(job_id)
            if entry is None:
                if job_id not in plan.effective_bands:
                    del self._told_bands[job_id]  # placed: it keeps the band it was placed in
            elif job_id not in plan.effective_bands:
                out.append(Delivery(job_id, EFFECTIVE_BAND, entry.spec.band or "interactive"))  # credits came back
                del self._told_bands[job_id]
        return out

    def publish_users(self) -> None:
        """Put the user table in the memo when it changed (one upsert, read by `iris user list`).

        While work is queued, at most every PUBLISH_INTERVAL seconds (each upsert is a history event,
        and every release changes someone's usage); at once when the queue is empty, so the table is
        exact once the cluster settles."""
        now = self.core.now()
        if self.core.state.pending and now - self._users_published_at < PUBLISH_INTERVAL:
            self._users_owed = True  # `_users_publish_timer` wakes the loop for it
            return
        self._users_owed = False
        running = self.core.state.placements.users  # kept as placements come and go (placement_index)
        pending: dict[str, int] = {}
        for entry in self.core.state.pending.values():
            pending[entry.spec.user] = pending.get(entry.spec.user, 0) + 1
        rows = users_memo(self.core.state.books, running, pending)
        tables = self._team_rows(pending)
        default = self.core.state.books.settings.default_credits
        if rows != self._published_users or tables != self._published_teams or default != self._published_default:
            self._published_users = rows
            self._published_teams = tables
            self._published_default = default
            self._users_published_at = now
            workflow.upsert_memo({USERS_MEMO: rows, TEAMS_MEMO: tables[0], QUEUE_MEMO: tables[1],
                                  DEFAULT_CREDITS_MEMO: default})  # fmt: skip

    def users_publish_timer(self) -> timedelta | None:
        """When a publication held back by PUBLISH_INTERVAL is due (the loop may have nothing else to wake it)."""
        if not self._users_owed:
            return None
        left = PUBLISH_INTERVAL - (self.core.now() - self._users_published_at)
        return timedelta(seconds=max(0.1, left))

    def _team_rows(self, pending: dict[str, int]) -> tuple[list[list[object]], list[list[object]]]:
        """The team table (empty without teams) and the queue table (workflows/scheduler/teams_memo.py)."""
        teams = self.core.state.books.settings.team_values()
        if not teams:
            return [], queue_memo(self.queue_entries, self.core.state.pending, teams, self._told_bands)
        fleet = [0, 0, 0, 0]
        for w in self.core.state.workers.values():
            if w.state == WorkerState.READY:
                fleet[0] += w.cpu_millis
                fleet[1] += w.memory_bytes
                fleet[2] += w.gpus
                fleet[3] += w.tpus
        table = teams_memo(teams, self.core.state.placements.shapes(), pending, fleet)
        return table, queue_memo(self.queue_entries, self.core.state.pending, teams, self._told_bands)
