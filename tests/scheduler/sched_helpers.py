"""Small builders shared by the scheduler tests."""

from __future__ import annotations

from scheduler import Constraint, Op, PendingJob, Resources, WorkerSnapshot

GIB = 1 << 30


def worker(
    worker_id: str, cpu: float = 8, memory_gib: int = 32, tpus: int = 0, gpus: int = 0, **attributes: object
) -> WorkerSnapshot:
    """Build a worker; attribute names use underscores for dashes (tpu_name -> tpu-name)."""
    attrs = {key.replace("_", "-"): value for key, value in attributes.items()}
    return WorkerSnapshot(worker_id, Resources(round(cpu * 1000), memory_gib * GIB, gpus, tpus), attrs)  # type: ignore[arg-type]


def tpu_slice(name: str, hosts: int, topology: str = "v5e-16", tpus: int = 4) -> list[WorkerSnapshot]:
    """Build the hosts of one TPU slice, listed in reverse tpu-worker-id order on purpose."""
    return [
        worker(f"{name}-w{i}", cpu=16, tpus=tpus, tpu_name=name, tpu_worker_id=i, tpu_topology=topology)
        for i in reversed(range(hosts))
    ]


def job(
    job_id: str,
    tasks: int = 1,
    cpu: float = 1,
    memory_gib: int = 1,
    tpus: int = 0,
    constraints: tuple[Constraint, ...] = (),
    **options: object,
) -> PendingJob:
    """Build a pending job with tasks 0..tasks-1."""
    request = Resources(round(cpu * 1000), memory_gib * GIB, 0, tpus)
    return PendingJob(job_id, tuple(range(tasks)), request, constraints, **options)  # type: ignore[arg-type]


def gang(job_id: str, hosts: int, topology: str | None = None, **options: object) -> PendingJob:
    """Build a coscheduled TPU job: one task per host, grouped by tpu-name."""
    constraints = (Constraint("tpu-topology", Op.EQ, topology),) if topology else ()
    return job(job_id, hosts, cpu=8, tpus=4, constraints=constraints, group_by="tpu-name", **options)


def placed(result: object, job_id: str) -> dict[int, str]:
    """Map task index to worker id for one job in a SchedulingResult."""
    return {a.task_index: a.worker_id for a in result.assignments if a.job_id == job_id}  # type: ignore[attr-defined]
