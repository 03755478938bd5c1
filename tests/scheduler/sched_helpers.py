"""Small builders shared by the scheduler tests."""

from __future__ import annotations

from scheduler import Band, Constraint, Op, PendingJob, Resources, RunningJob, RunningTask, WorkerSnapshot

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


def running(
    job_id: str,
    workers: list[WorkerSnapshot] | list[str],
    band: str = "batch",
    user: str = "ana",
    request: Resources | None = None,
    started_at: float = 0.0,
    coscheduled: bool = True,
) -> RunningJob:
    """Running work of one job, task i on the i-th worker given."""
    ids = [w if isinstance(w, str) else w.worker_id for w in workers]
    return RunningJob(
        job_id,
        user,
        Band(band),
        request or Resources(8000, GIB, 0, 4),
        tuple(RunningTask(i, worker_id, started_at) for i, worker_id in enumerate(ids)),
        coscheduled,
    )


def occupied(workers: list[WorkerSnapshot], *jobs: RunningJob) -> list[WorkerSnapshot]:
    """The workers with the running jobs' requests taken from their free capacity (capacity kept)."""
    used: dict[str, Resources] = {}
    for job in jobs:
        for task in job.tasks:
            used[task.worker_id] = used.get(task.worker_id, Resources()) + job.request
    return [
        WorkerSnapshot(w.worker_id, w.free - used.get(w.worker_id, Resources()), w.attributes, w.free)
        for w in workers
    ]
