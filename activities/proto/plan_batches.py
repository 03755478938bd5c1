"""A scheduling plan's assignments in the batches the scheduler commits and announces, a workflow task each.

The scheduler workflow commits a big plan a batch of whole jobs at a time, each batch just before it is
told. Grouping ~60,000 assignments by job inside the workflow took its task ~0.25 s (a protobuf wrapper
per element), so the scheduling activity does it once: `fill` writes the assignments job by job (jobs
in the order the pass placed them, a job never split), records where each batch ends, and puts the
preemptors' assignments after the last batch (the workflow does not commit them: they wait for their
victims, with those workers held). The workflow then reads one batch's slice per task (`batches`).
"""

from __future__ import annotations

from collections.abc import Iterable

from activities.proto import cluster_pb2 as pb

ANNOUNCE_BATCH = 2_000  # assignments per batch (a job is never split, so a batch may hold more)

Row = tuple[str, int, str]  # job id, task index, worker id


def fill(plan: pb.SchedulingPlan, assignments: Iterable[Row], size: int = ANNOUNCE_BATCH) -> None:
    """Add `assignments` to `plan` ordered by job and cut into batches of about `size`; evictions already set."""
    preemptors = {e.preemptor for e in plan.evictions}
    by_job: dict[str, list[Row]] = {}
    for row in assignments:
        found = by_job.get(row[0])
        if found is None:
            by_job[row[0]] = [row]
        else:
            found.append(row)
    out = plan.assignments
    taken = 0
    for job_id, rows in by_job.items():
        if job_id in preemptors:
            continue
        if taken >= size:
            plan.batch_ends.append(len(out))
            taken = 0
        for job, index, worker in rows:
            out.add(job_id=job, task_index=index, worker_id=worker)
        taken += len(rows)
    if taken:
        plan.batch_ends.append(len(out))
    for job_id in preemptors:
        for job, index, worker in by_job.get(job_id, ()):
            out.add(job_id=job, task_index=index, worker_id=worker)
    plan.batched = True


def ensure_batched(plan: pb.SchedulingPlan, size: int = ANNOUNCE_BATCH) -> None:
    """Order and cut a plan built without `fill` (by hand, in tests), in place; reads every assignment."""
    if plan.batched:
        return
    rows = [(a.job_id, a.task_index, a.worker_id) for a in plan.assignments]
    del plan.assignments[:]
    fill(plan, rows, size)


def batches(plan: pb.SchedulingPlan) -> list[tuple[int, int]]:
    """The batches as (start, end) positions in `plan.assignments` (the preemptors' ones left out)."""
    ensure_batched(plan)
    starts = [0, *plan.batch_ends]
    return list(zip(starts, plan.batch_ends, strict=False))


def held_back_from(plan: pb.SchedulingPlan) -> int:
    """Where the preemptors' assignments start (they run to the end of `plan.assignments`)."""
    ensure_batched(plan)
    return plan.batch_ends[-1] if plan.batch_ends else 0


def by_job(assignments: Iterable[pb.SchedulingAssignment]) -> dict[str, list[pb.SchedulingAssignment]]:
    """A batch's assignments by job, in order."""
    jobs: dict[str, list[pb.SchedulingAssignment]] = {}
    for a in assignments:
        found = jobs.get(a.job_id)
        if found is None:
            jobs[a.job_id] = [a]
        else:
            found.append(a)
    return jobs
