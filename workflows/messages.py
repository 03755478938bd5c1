"""Signals and queries exchanged between the Iris workflows.

All are small dataclasses: a signal carries ids and numbers, never payloads
(pickles and results live in the blob store).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from activities.contracts import TaskNetwork

# A job's queueing request is the contract between the job, the controller's signal batches and the scheduler:
# defined there, named here too for the workflows that build and read it.
from activities.contracts.queueing import ConstraintSpec as ConstraintSpec
from activities.contracts.queueing import Enqueue as Enqueue
from activities.contracts.queueing import SchedulingSpec as SchedulingSpec


@dataclass
class Claim:
    """Signal `claim`, task -> a scheduler that started empty: this attempt holds a place on `worker_id`."""

    job_id: str
    task_index: int
    attempt: int
    worker_id: str
    spec: SchedulingSpec
    ports: dict[str, int] = field(default_factory=dict)  # the ports it holds on its host


@dataclass
class Assigned:
    """The scheduler committed capacity for this attempt on `worker_id` (inside `reservation_id`, if any;
    with ports and peers, for a distributed job)."""

    attempt: int
    worker_id: str
    session: str = ""  # the worker's agent session when placed: a failure to pick it up is that session's
    network: TaskNetwork | None = None
    reservation_id: str = ""
    # The worker's agent's heartbeat timeout (its --heartbeat-timeout): the attempt's activity is lost after
    # this long without a heartbeat. 0 (an older agent or scheduler): the default, 10 s.
    heartbeat_timeout_seconds: float = 0.0


@dataclass
class Reserve:
    """Signal `reserve`, job -> scheduler: hold this capacity for the job's tree while the job runs.

    `entries` are [cpu_millis, memory_bytes, gpus, tpus], one per worker's worth. Idempotent per job.
    """

    job_id: str
    entries: list[list[int]]
    constraints: list[ConstraintSpec] = field(default_factory=list)
    tolerations: list[str] = field(default_factory=list)
    user: str = ""


@dataclass
class Evict:
    """Signal `evict`, scheduler -> task: stop this attempt (SIGTERM, the grace, SIGKILL) for higher-band work."""

    attempt: int
    reason: str = ""
    grace_seconds: float = 30.0  # the cluster's SIGTERM-to-SIGKILL grace


@dataclass
class SetCredits:
    """Signal `set_credits` to the scheduler: `user`'s remaining balance becomes `amount`."""

    user: str
    amount: float


@dataclass
class Unschedulable:
    attempt: int
    reason: str


@dataclass
class WorkerLost:
    """Signal `worker_lost`, a liveness monitor -> the scheduler: the session's hosts are lost, all of an agent's in
    one signal (one per host made a 100-host agent's end 100 history events, handlers and log lines: ~0.2 ms of
    the scheduler's CPU each, 270 ms for a burst of them in the scale bench)."""

    worker_id: str
    session: str
    reason: str
    more_worker_ids: list[str] = field(default_factory=list)  # the session's other hosts


@dataclass
class RegistrarItem:
    """What the registrar holds, in arrival order, as its run carries it to the next: an agent's batch (base64 of a
    WorkerBatch, as `WorkerSessionInput.registration` carries one) or a session's end."""

    batch: str = ""
    lost: WorkerLost | None = None


@dataclass
class RegistrarCarry:
    """The registrar's input when it continues as new: what it had not handed on to the scheduler yet."""

    items: list[RegistrarItem] = field(default_factory=list)


@dataclass
class TaskRetrying:
    """A task goes back to the queue; the job updates its table."""

    task_index: int
    attempt: int
    failure_count: int
    preemption_count: int
    last_state: str
    error: str = ""


@dataclass
class CordonWorkers:
    """Signal `cordon_workers` to the scheduler: no new work on these workers (or again, with cordoned=False).

    Running tasks run to their end (Slurm's drain): a drained worker is a cordoned one with no tasks left.
    With `only_if_idle`, all of them are cordoned or none: none when any holds a placement. An idle
    slice's scale-down asks this way, so a job placed on it as it was picked keeps its slice.
    """

    worker_ids: list[str]
    cordoned: bool = True
    reason: str = ""
    only_if_idle: bool = False


@dataclass
class RemoveWorkers:
    """Signal `remove_workers` to the scheduler: these workers are gone for good (their slice was deleted).

    They leave the scheduler's state at once; their running tasks are treated as preempted.
    """

    worker_ids: list[str]
    reason: str


@dataclass
class RegistrationReply:
    """Signal `registered`, scheduler -> WorkerWorkflow: the hosts of its batch that were refused, and why."""

    refused: dict[str, str] = field(default_factory=dict)


# Workflow inputs and results: here rather than beside their workflows because the sandbox re-imports
# a workflow's module for every run, and building these classes was ~60% of that import.


@dataclass
class TaskInput:
    job_id: str
    task_index: int
    num_tasks: int
    spec: SchedulingSpec
    argv: list[str] = field(default_factory=list)
    function_blob: str = ""
    env: dict[str, str] = field(default_factory=dict)
    image: str = ""
    max_retries_failure: int = 0
    max_retries_preemption: int = 100
    submitted_at: float = 0.0
    enqueued_by_job: bool = True
    first_attempt: int = 0
    # A gang member runs exactly one attempt: its job retries the whole gang as a unit.
    gang: bool = False
    bundle_blob: str = ""  # the job's code bundle; the agent unpacks it as the working directory
    setup: list[str] = field(default_factory=list)  # run once per job and host before the task
    launch_blob: str = ""  # argv, env and setup stored once for the job (a big command); see JobRequest
    # The job continues as new, so the run that started this task may be gone when it ends: the
    # task then sends its result to the job's workflow id (TASK_ENDED), which reaches the current run.
    report_end: bool = False
    namespace: str = ""  # the job's namespace: its tasks get it as IRIS_NAMESPACE (job trees)


@dataclass
class TaskResult:
    task_index: int
    state: str
    worker_id: str = ""
    attempt: int = 0
    failure_count: int = 0
    preemption_count: int = 0
    exit_code: int | None = None
    error: str = ""
    result_blob: str = ""
    dispatch_failed: bool = False  # a gang member whose worker never picked it up
    # The latest attempt's usage as its agent sampled it (0 when it did not run to its end there).
    peak_memory_bytes: int = 0
    cpu_seconds: float = 0.0
    run_seconds: float = 0.0
    # The task's state changes, e.g. "ASSIGNED@0 w1", "RUNNING@0", "SUCCEEDED@0" (the last MAX_TRANSITIONS).
    transitions: list[str] = field(default_factory=list)


@dataclass
class GangProgress:
    """A gang's attempt number and spent budgets, carried across continue-as-new."""

    attempt: int = 0
    failures: int = 0
    preemptions: int = 0
    has_children: bool = False  # a child job announced itself: the job's end sweeps its tree (job_tree)
