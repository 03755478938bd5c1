"""The scheduler workflow's deliveries: assignments, timeouts, pending reasons and registration answers.

Signals go out through regular activities (deliver_signals, deliver_assignments), never as signal
commands and never by local activity: no workflow task stays open while signals are sent, and the
run's history records each delivery as a command the next task can only agree with.

Why not a local activity, even for the small urgent batches of the submit-to-running path: a local
activity runs inside a workflow task, so a controller that answers a query on a run it did not hold
(docs/reliability.md, "Replays") ran one outside any task and kept the run in its cache ahead of
history; its next task then failed ("Attempted to check for LA marker handling in invalid state") and
queries waited on it. The cost is one trip through matching: ~30 ms of submit-to-running
(docs/performance.md).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio import workflow

from workflows.scheduler.scheduler_queue import MAX_COMMIT_PER_PASS  # a part of the workflow, as this module

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        ASSIGNED,
        DELIVER_ASSIGNMENTS,
        DELIVER_SIGNALS,
        UNSCHEDULABLE,
        Delivery,
        DeliveryOutcome,
    )
    from activities.contracts.announcing import AssignmentBatch
    from activities.proto import cluster_pb2 as pb
    from activities.proto import plan_batches
    from activities.proto.plan_batches import ANNOUNCE_BATCH  # deliveries per deliver_signals call, too
    from workflows.messages import (
        Enqueue,
    )
    from workflows.scheduler.replayed_inputs import command_input
    from workflows.scheduler.scheduler_core import SchedulerCore
    from workflows.scheduler.scheduler_network import announce_batches
    from workflows.scheduler.scheduler_state import PendingEntry

# How long a late assignment waits for its task in the background. A task still not there then
# (its job runs but has not started it) goes back to the queue, so it is placed again, and told,
# whenever it comes; its place is given back meanwhile.
LATE_PATIENCE_SECONDS = 60.0
# The scheduler's own regular activities (the pass, the deliveries) heartbeat: a controller killed
# while one runs has it retried on a live controller after this, not after its whole timeout. (The
# deliveries beat without one until 2026-12-03: a controller SIGKILLed while it sent the scheduler's
# signals stalled scheduling for their two-minute timeout, 124 s in the chaos test.) They beat every 2 s
# (activities/heartbeat.py); the SDK sends a beat at most every 80% of this, and there are only a few of them.
# 5 s, not 10 s (until 2026-12-06): with a short sticky timeout, the suite's chaos run took work again 6.0 s after
# a controller kill, against 9.1 s with 10 s, side by side (docs/reliability.md).
PASS_HEARTBEAT = timedelta(seconds=5)
# How long the announcement itself waits for a task that is not there yet: a job's children start
# tens of milliseconds after its enqueue, unless something broke.
ANNOUNCE_GRACE_SECONDS = 2.0
T = TypeVar("T")

if TYPE_CHECKING:
    from workflows.scheduler.scheduler_queue import Queue


async def _delivery(name: str, arg: Any, result_type: type[T], *more: Any, timeout: float = 120.0) -> T:
    """Run a delivery activity (a regular one: the module says why) on `arg` (built only when the task is new:
    replayed, history holds what it was, replayed_inputs) and `more` arguments."""
    return await workflow.execute_activity(
        name, args=[arg, *more], result_type=result_type,
        start_to_close_timeout=timedelta(seconds=timeout), heartbeat_timeout=PASS_HEARTBEAT,
    )  # fmt: skip


async def _announce(deliveries: list[Delivery], patience: float, timeout: float = 120.0) -> DeliveryOutcome:
    """`deliver_assignments` of `deliveries`, as one AssignmentBatch (columns: activities/contracts/announcing.py)."""
    batch = command_input(lambda: AssignmentBatch.of(deliveries), AssignmentBatch([], [], []))
    return await _delivery(DELIVER_ASSIGNMENTS, batch, DeliveryOutcome, patience, timeout=timeout)


class Deliveries:
    """The signals the scheduler sends (a part of SchedulerWorkflow: scheduler_core says how the parts meet)."""

    def __init__(self, core: SchedulerCore, queue: Queue) -> None:
        self.core = core
        self._queue = queue  # commits what is announced, takes back what could not be
        self.late = 0  # background deliveries of late assignments not finished yet

    async def send_replies(self) -> None:
        """Answer the registrations owed; the activity says how many answers it was given, and any
        owed beyond them stay owed, at the head (the loop wakes while any are, not on a flag).

        Why count: the signals of one workflow task can reach the workflow in two activations (a query
        answered on a controller without the run in its cache: docs/reliability.md, "Replays"). Then the
        answers sent after the first are fewer than a replay, which sees every signal at once, owes. What
        history recorded as sent is what counts as sent, so both send the rest in the same next task.
        """
        replies, self.core.replies = self.core.replies, []
        self.core.reply_barrier = False
        answer = await workflow.execute_activity(
            DELIVER_SIGNALS, args=[replies, True], start_to_close_timeout=timedelta(seconds=120),
            heartbeat_timeout=PASS_HEARTBEAT,
        )  # fmt: skip
        sent = answer["sent"] if isinstance(answer, dict) else len(replies)  # a bare list: recorded before counts
        if sent < len(replies):
            self.core.replies[:0] = replies[sent:]

    async def deliver(self, deliveries: list[Delivery]) -> list[int]:
        """Send signals by activity; the indices of those whose workflow is gone."""
        return await _delivery(DELIVER_SIGNALS, command_input(lambda: deliveries, list[Delivery]()), list[int])

    async def announce(self, plan: pb.SchedulingPlan) -> None:
        """Commit the plan, then tell its tasks, a batch at a time; a task that is gone gives its place back.

        Each batch of jobs (cut by the scheduling activity, plan_batches) is read, committed (against the
        state then) and told in a workflow task of its own: committing a 10,000-task plan at once took one
        task ~0.3 s at 100,000 placements. The first batch is committed in the task that reads the plan:
        parsing a 60,000-assignment plan and reading its cuts takes 6-15 ms (the activity cut it).
        """
        cuts = plan_batches.batches(plan)
        now = self.core.now()
        timed_out: list[tuple[Delivery, pb.SchedulingAssignment | None]] | None = None  # told with the first batch
        committed = 0
        for start, end in cuts:
            if committed >= MAX_COMMIT_PER_PASS:
                self.core.dirty = True  # the rest of the plan waits for the next pass, computed afresh
                break
            self.core.apply_held()  # signals held behind a `configure`: the commit sees every one that came
            jobs = plan_batches.by_job(plan.assignments[start:end])
            # What a late assignment needs to go back to the queue (the commit drops emptied entries).
            pending = self.core.state.pending
            entries = {job_id: pending[job_id] for job_id in jobs if job_id in pending}
            accepted = self._queue.commit(plan, now=now, limit=None, jobs=jobs)
            committed += len(accepted)
            outgoing: list[tuple[Delivery, pb.SchedulingAssignment | None]] = [
                (Delivery(key, ASSIGNED, assigned), placed) for key, assigned, placed in accepted
            ]
            if timed_out is None:
                timed_out = self._timed_out(plan)
                outgoing += timed_out
            await self._tell(outgoing, entries)
        if timed_out is None:
            await self._tell(self._timed_out(plan), {})

    def _timed_out(self, plan: pb.SchedulingPlan) -> list[tuple[Delivery, pb.SchedulingAssignment | None]]:
        return [(Delivery(key, UNSCHEDULABLE, arg), None) for key, arg in self._queue.take_timed_out(plan)]

    async def _tell(
        self, outgoing: list[tuple[Delivery, pb.SchedulingAssignment | None]], entries: dict[str, PendingEntry]
    ) -> None:
        # In batches, one workflow task each, so no task holds the 100,000 deliveries of a big
        # pass (the deadlock detector fires after 2 s of workflow code).
        for batch in announce_batches(outgoing, ANNOUNCE_BATCH):  # and a gang's host lists split
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
                self._queue.release_place(placed.job_id, placed.task_index, delivery.arg.attempt)

    async def _deliver_assignments(self, deliveries: list[Delivery]) -> DeliveryOutcome:
        """Announce a batch as `_deliver` does, with tasks not started yet handed back as late."""
        return await _announce(deliveries, ANNOUNCE_GRACE_SECONDS)

    def _deliver_late(
        self, late: list[tuple[Delivery, pb.SchedulingAssignment | None]], entries: dict[str, PendingEntry]
    ) -> None:
        """Deliver assignments whose task has not started yet without holding the loop: a regular
        activity waits for each task while its job runs. A task that is gone gives its place back;
        one still not there after LATE_PATIENCE_SECONDS gives it back and goes back to the queue.
        The run does not continue as new before this ends."""
        self.late += 1
        workflow.logger.info("%d assignments wait for their task to start", len(late))

        async def deliver() -> None:
            try:
                outcome = await _announce([d for d, _ in late], LATE_PATIENCE_SECONDS,
                                          timeout=LATE_PATIENCE_SECONDS + 60)  # fmt: skip
                self._give_back(late, outcome.gone + outcome.late)
                for index in outcome.late:
                    delivery, placed = late[index]
                    entry = entries.get(placed.job_id) if placed is not None else None
                    if placed is None or entry is None:
                        continue
                    workflow.logger.warning("task %s did not start: queued again", delivery.workflow_id)
                    attempts = {placed.task_index: delivery.arg.attempt}
                    self._queue.enqueue_one(Enqueue(entry.job_id, entry.spec, attempts, entry.submitted_at))
            finally:
                self.late -= 1

        asyncio.create_task(deliver())  # noqa: RUF006 - tracked by _late_deliveries
