"""What a job asks of the scheduler to queue its tasks: the spec, one job's enqueue, and a batch of them.

The job workflow builds the enqueues, the controller's signal activity coalesces them into batches
(activities.signals) and the scheduler queues them (workflows/scheduler/scheduler_queue.py): the contract
between all three, so it sits here, under both the workflows and the activities.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from activities.contracts.dataclass_json import plan_for, to_plain


@dataclass
class ConstraintSpec:
    key: str
    op: str
    # Any, not a union: Temporal's converter would coerce True and 1.0 to 1 through a union hint.
    value: Any = None  # a list for IN / NOT_IN
    soft: bool = False  # a preference, not a requirement


@dataclass
class SchedulingSpec:
    """What the scheduler needs to know about a job to place its tasks."""

    cpu_millis: int
    memory_bytes: int
    gpus: int = 0
    tpus: int = 0
    constraints: list[ConstraintSpec] = field(default_factory=list)
    group_by: str = ""
    priority: int = 0
    scheduling_timeout_seconds: float = 0.0  # 0 = wait forever
    tolerations: list[str] = field(default_factory=list)
    num_groups: int = 1  # > 1: a multi-slice gang, its tasks split evenly over that many groups
    ports: list[str] = field(default_factory=list)  # named ports each task gets on its host
    coordinator: bool = False  # task 0 gets a coordinator port (a job of more than one task)
    band: str = ""  # "production" | "interactive" | "batch"; "" = interactive
    user: str = ""  # whose job: fair share and credits
    max_concurrent: int = 0  # > 0: at most this many of the job's tasks placed at once (scheduler.throttle)


@dataclass
class Enqueue:
    """Ask the scheduler to place these tasks (one signal per job, or per retried task)."""

    job_id: str
    spec: SchedulingSpec
    attempts: dict[int, int]  # task index -> attempt being placed
    submitted_at: float = 0.0  # workflow time of the job's submission: FIFO key


@dataclass
class EnqueueBatch:
    """Several jobs' enqueues as one `enqueue_batch` signal, column by column, each distinct spec once.

    As a list of `Enqueue`, every job's spec was decoded anew (~9 us each, through three list fields of its
    own): 30,000 enqueues took ~0.6 s to decode, 0.26 s of it the specs, most of a scheduler run's replay. As
    columns, a batch decodes its few specs once and checks its number columns at once (~0.1 s for the same).
    """

    specs: list[SchedulingSpec]
    job_ids: list[str]
    spec: list[int]  # by position with job_ids: the job's entry in specs
    submitted_at: list[float]  # by position: Enqueue.submitted_at
    task_counts: list[int]  # by position: how many of task_indices (and attempts) are the job's
    task_indices: list[int]  # the jobs' task indices, one job after the other
    attempts: list[int]  # by position with task_indices: the attempt being placed

    def _check(self) -> None:
        """ValueError naming the columns that do not agree (a batch from a broken sender)."""
        jobs = len(self.job_ids)
        if not len(self.spec) == len(self.submitted_at) == len(self.task_counts) == jobs:
            raise ValueError(f"EnqueueBatch: {jobs} job_ids, {len(self.spec)} spec, {len(self.submitted_at)} "
                             f"submitted_at, {len(self.task_counts)} task_counts: one of each per job")
        if len(self.task_indices) != len(self.attempts) or sum(self.task_counts) != len(self.task_indices):
            raise ValueError(f"EnqueueBatch: task_counts add up to {sum(self.task_counts)}, with "
                             f"{len(self.task_indices)} task_indices and {len(self.attempts)} attempts")
        if self.spec and not 0 <= min(self.spec) <= max(self.spec) < len(self.specs):
            raise ValueError(f"EnqueueBatch: spec refers past the {len(self.specs)} specs")

    @classmethod
    def of(cls, enqueues: Iterable[Enqueue | Mapping[str, Any]]) -> EnqueueBatch:
        """The batch of these enqueues, as objects or as the JSON of one (what an activity receives as `Any`)."""
        batch = cls([], [], [], [], [], [], [])
        known: dict[str, int] = {}
        for enqueue in enqueues:
            plain = to_plain(enqueue) if isinstance(enqueue, Enqueue) else enqueue
            key = repr(plain["spec"])  # equal specs from one sender list their fields in one order
            position = known.get(key)
            if position is None:
                position = known[key] = len(batch.specs)
                batch.specs.append(_SPEC_PLAN(plain["spec"]))
            batch.job_ids.append(plain["job_id"])
            batch.spec.append(position)
            batch.submitted_at.append(float(plain.get("submitted_at", 0.0)))
            attempts = plain["attempts"]
            batch.task_counts.append(len(attempts))
            batch.task_indices.extend(map(int, attempts))  # JSON gives the keys as strings
            batch.attempts.extend(attempts.values())
        return batch

    def requests(self, specs: list[SchedulingSpec] | None = None) -> list[Enqueue]:
        """The enqueues again, in their order; `specs` in place of the batch's own (the receiver's equal ones).
        ValueError if the columns do not agree."""
        self._check()
        shared = self.specs if specs is None else specs
        out = []
        start = 0
        for job_id, spec, submitted_at, count in zip(self.job_ids, self.spec, self.submitted_at, self.task_counts,
                                                     strict=True):
            end = start + count
            out.append(Enqueue(job_id, shared[spec], dict(zip(self.task_indices[start:end],
                                                               self.attempts[start:end], strict=True)), submitted_at))
            start = end
        return out


def _spec_plan() -> Any:
    plan = plan_for(SchedulingSpec)
    if plan is None:  # every field of a spec is a type the plans know; a new one must be too
        raise TypeError("SchedulingSpec has a field activities.contracts.dataclass_json cannot decode")
    return plan


_SPEC_PLAN = _spec_plan()
