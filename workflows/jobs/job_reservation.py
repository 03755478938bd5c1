"""A reserving job's two messages to the scheduler: hold my reservation, and (when I end) release it.

Sent by the local activity that already carries the job's enqueue (no extra workflow task), only by
jobs that asked for a reservation, so every other job's history keeps its shape. Both signals are
idempotent at the scheduler.
"""

from __future__ import annotations

from temporalio import workflow

from workflows.jobs.job_waves import tell_scheduler  # workflow code: sandboxed

with workflow.unsafe.imports_passed_through():
    from activities.contracts import RELEASE_RESERVATION, RESERVE
    from activities.proto import cluster_pb2 as pb
    from activities.proto.values import constraint_fields
    from workflows.messages import ConstraintSpec, Reserve


def reserve_request(job_id: str, req: pb.JobRequest) -> Reserve:
    """The job's reservation as the scheduler takes it (entries as [cpu_millis, memory_bytes, gpus, tpus])."""
    return Reserve(
        job_id=job_id,
        entries=[[r.cpu_millis, r.memory_bytes, r.gpus, r.tpus] for r in req.reservation],
        constraints=[ConstraintSpec(*constraint_fields(c)) for c in req.reservation_constraints],
        tolerations=list(req.tolerations),
        user=req.user,
    )


async def hold(job_id: str, req: pb.JobRequest) -> None:
    """Ask the scheduler to hold the job's reservation (before its tasks start, so before any child)."""
    await tell_scheduler(RESERVE, reserve_request(job_id, req))


async def release(job_id: str) -> None:
    """The job ended: its reservation's capacity goes back to the pool in the scheduler's next pass."""
    await tell_scheduler(RELEASE_RESERVATION, job_id)
