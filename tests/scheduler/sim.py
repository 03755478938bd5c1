"""A small discrete-time cluster for the scheduler's tests: passes on a clock, tasks that end on their own.

Every `step` seconds it frees what finished, runs one pass (`find_assignments` with a ShareSnapshot on
the simulated clock) and starts what the pass placed. It records when each job was submitted, first
estimated (`scheduler.estimate`, as the scheduling activity computes it) and started.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from scheduler import PendingJob, Resources, RunningJob, RunningTask, ShareSnapshot, WorkerSnapshot, find_assignments
from scheduler.estimate import estimate_starts
from scheduler.placement import SchedulingPolicy


@dataclass
class Sim:
    workers: list[WorkerSnapshot]  # capacity in `free`
    policy: SchedulingPolicy = field(default_factory=SchedulingPolicy)
    now: float = 0.0
    pending: dict[str, PendingJob] = field(default_factory=dict)
    submitted: dict[str, float] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    running: dict[str, tuple[PendingJob, list[tuple[int, str]], float, float]] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    estimated: dict[str, float] = field(default_factory=dict)
    finished: list[float] = field(default_factory=list)  # durations of finished tasks, newest last

    def submit(self, job: PendingJob, duration: float) -> None:
        self.pending[job.job_id] = job
        self.submitted[job.job_id] = self.now
        self.durations[job.job_id] = duration

    def free(self) -> list[WorkerSnapshot]:
        used: dict[str, Resources] = {}
        for job, tasks, _, _ in self.running.values():
            for _, worker in tasks:
                used[worker] = used.get(worker, Resources()) + job.request
        return [WorkerSnapshot(w.worker_id, w.free - used.get(w.worker_id, Resources()), w.attributes, w.free)
                for w in self.workers]  # fmt: skip

    def step(self, seconds: float = 10.0, on_step: Callable[[Sim], None] | None = None) -> None:
        """Run one pass now, then move the clock on by `seconds` and end what finished by then."""
        workers = self.free()
        jobs = [replace(j, waited_seconds=self.now - self.submitted[j.job_id]) for j in self.pending.values()]
        running = [RunningJob(job_id, job.user, job.band, job.request,
                              tuple(RunningTask(i, w, start) for i, w in tasks), bool(job.group_by))
                   for job_id, (job, tasks, start, _) in self.running.items()]  # fmt: skip
        result = find_assignments(workers, jobs, share=ShareSnapshot(now=self.now, running=running),
                                  policy=self.policy)  # fmt: skip
        placed: dict[str, list[tuple[int, str]]] = {}
        for a in result.assignments:
            placed.setdefault(a.job_id, []).append((a.task_index, a.worker_id))
        for job_id, tasks in placed.items():
            job = self.pending.pop(job_id)
            assert len(tasks) == len(job.task_indices), "the simulation starts whole jobs only"
            self.running[job_id] = (job, tasks, self.now, self.now + self.durations[job_id])
            self.started[job_id] = self.now
        self._estimate(result.queue, result.pending_reasons)
        if on_step is not None:
            on_step(self)
        self.now += seconds
        for job_id in [j for j, (_, _, _, end) in self.running.items() if end <= self.now]:
            job, tasks, start, end = self.running.pop(job_id)
            self.finished.extend([end - start] * len(tasks))

    def _estimate(self, queue: tuple[str, ...], reasons: dict[str, str] | object) -> None:
        free = [0, 0, 0, 0]
        for w in self.free():
            free = [free[0] + w.free.cpu_millis, free[1] + w.free.memory_bytes, free[2] + w.free.gpus,
                    free[3] + w.free.tpus]  # fmt: skip
        running = [(start, job.request) for job, tasks, start, _ in self.running.values() for _ in tasks]
        typical = statistics.median(self.finished[-256:]) if self.finished else None
        waiting = [self.pending[j] for j in queue if j in self.pending]
        for e in estimate_starts(waiting, Resources(*free), running, self.now, typical):
            if e.job_id not in self.estimated and e.start is not None:
                self.estimated[e.job_id] = e.start
