"""The queue is FIFO by submission, whatever order the jobs' enqueues reach the scheduler in.

Two jobs submitted one after the other start two job workflows whose first tasks race: the second's
enqueue can arrive first (it did in CI, and the dashboard listed a user's jobs out of order).
"""

from __future__ import annotations

from workflows.messages import Enqueue, SchedulingSpec
from workflows.scheduler.scheduler_queue import SUBMISSION_ORDER_REACH
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow

SPEC = SchedulingSpec(cpu_millis=100, memory_bytes=1)


def _scheduler() -> SchedulerWorkflow:
    scheduler = SchedulerWorkflow()
    scheduler.core.clock = lambda: 1_000.0
    return scheduler


def test_a_job_whose_enqueue_arrives_late_takes_its_place_by_submission() -> None:
    scheduler = _scheduler()
    for job_id, submitted in (("a", 1.0), ("c", 3.0), ("b", 2.0), ("d", 3.0)):
        scheduler.queue.enqueue_one(Enqueue(job_id, SPEC, {0: 0}, submitted))
    assert ["a", "b", "c", "d"] == list(scheduler.core.state.pending)  # equal times keep arrival order


def test_a_retry_and_a_job_behind_many_newer_ones_keep_arrival_order() -> None:
    """A retried task's job goes last as before; so does a first enqueue that would pass more than
    SUBMISSION_ORDER_REACH newer jobs (a rebuilt scheduler's reports: the cost stays linear)."""
    scheduler = _scheduler()
    pending = scheduler.core.state.pending
    scheduler.queue.enqueue_one(Enqueue("new", SPEC, {0: 0}, 10.0))
    scheduler.queue.enqueue_one(Enqueue("retried", SPEC, {0: 1}, 5.0))
    assert ["new", "retried"] == list(pending)
    for i in range(SUBMISSION_ORDER_REACH + 5):
        scheduler.queue.enqueue_one(Enqueue(f"n{i}", SPEC, {0: 0}, 100.0 + i))
    last = SUBMISSION_ORDER_REACH + 4
    scheduler.queue.enqueue_one(Enqueue("between", SPEC, {0: 0}, 100.0 + last - 2.5))
    assert [f"n{last - 3}", "between", f"n{last - 2}"] == list(pending)[-5:-2]
    scheduler.queue.enqueue_one(Enqueue("old", SPEC, {0: 0}, 50.0))
    assert "old" == list(pending)[-1]
    assert sum(len(e.attempts) for e in pending.values()) == len(pending)  # nothing lost or doubled
