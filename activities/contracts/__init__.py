"""Inputs and outputs of the activities that workflows call by name.

Most run on worker hosts (another process, the worker agent), so the
dataclasses here are the whole contract between the control plane and the
agents; `Delivery` is the input of the control plane's own signal-sending
local activity.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# -- names shared by the control plane, the worker agents and the client
SCHEDULER_WORKFLOW_ID = "iris-scheduler"
REGISTRAR_WORKFLOW_ID = "iris-registrar"
AUTOSCALER_WORKFLOW_ID = "iris-autoscaler"
CONTROL_TASK_QUEUE = "iris-control"
WAIT_TASK_QUEUE = "iris-waits"  # long waits of the control plane (a job's dependencies): their own activity slots
HEALTHY_WORKER_QUERY = "healthy_worker_count"
# The Worker Deployment every controller belongs to; each controller build is one version of it
# (docs/operators.md: a run finishes on the build that started it).
CONTROL_DEPLOYMENT = "iris-control"
ASSIGNED = "assigned"  # signal scheduler -> TaskWorkflow: the task's place

# Search attributes: the client lists jobs by them (one visibility call, no workflow queried) and the
# Temporal UI filters by them, e.g. `IrisKind = "Job" AND IrisJobState = "RUNNING"`.
KIND_ATTRIBUTE = "IrisKind"  # on every Iris workflow: one of the *_KIND values below
JOB_STATE_ATTRIBUTE = "IrisJobState"
JOB_NAME_ATTRIBUTE = "IrisJobName"
JOB_USER_ATTRIBUTE = "IrisUser"
JOB_PRIORITY_ATTRIBUTE = "IrisPriority"  # Keyword: the band a job asked for
JOB_TASKS_ATTRIBUTE = "IrisTasks"  # a job's task count, e.g. `IrisTasks > 1000`
JOB_NAMESPACE_ATTRIBUTE = "IrisNamespace"  # the namespace a job runs in (default: its user)
JOB_PARENT_ATTRIBUTE = "IrisParentJob"  # the id of the job whose task submitted this one ("" = a root job)
# Keyword search attribute of every slice workflow (CREATING, READY, ...): the UI's fleet view.
SLICE_STATE_ATTRIBUTE = "IrisSliceState"
SEARCH_ATTRIBUTES: dict[str, str] = {
    KIND_ATTRIBUTE: "Keyword",
    JOB_STATE_ATTRIBUTE: "Keyword",
    JOB_NAME_ATTRIBUTE: "Keyword",
    JOB_USER_ATTRIBUTE: "Keyword",
    JOB_PRIORITY_ATTRIBUTE: "Keyword",
    JOB_TASKS_ATTRIBUTE: "Int",
    JOB_NAMESPACE_ATTRIBUTE: "Keyword",
    JOB_PARENT_ATTRIBUTE: "Keyword",
    SLICE_STATE_ATTRIBUTE: "Keyword",
}
"""Name -> Temporal type (`Keyword`, `Int`): the dev server's flags and the controller's registration."""
JOB_KIND, TASK_KIND, WORKER_KIND, SCHEDULER_KIND = "Job", "Task", "Worker", "Scheduler"
SLICE_KIND, AUTOSCALER_KIND, TASK_ACCESS_KIND, REGISTRAR_KIND = "Slice", "Autoscaler", "TaskAccess", "Registrar"
KINDS = (
    JOB_KIND, TASK_KIND, WORKER_KIND, SCHEDULER_KIND, SLICE_KIND, AUTOSCALER_KIND, TASK_ACCESS_KIND, REGISTRAR_KIND
)
"""Every value IrisKind takes: the README's saved queries filter the Temporal UI by them."""


class UnreadablePayload(ValueError):  # noqa: N818 - a payload, not an action, is what failed
    """A payload that cannot be read here: encrypted under another key (or none), malformed, another version.

    Raised by Iris's payload converter and by workflow code that decodes a raw payload itself; a
    signal whose handler raises it is dropped and recorded (iris.controller.payload_guard), never retried.
    """


RESERVATIONS_MEMO = "reservations"
"""The scheduler's memo key where it publishes its reservations (a list of dicts, see
workflows/scheduler/reservation_state.py): `iris reservation list` reads it without querying the scheduler."""
RESERVATION_ENV = "IRIS_RESERVATION_ID"  # in the environment of every task of a reservation's tree


def reservation_id_of(job_id: str) -> str:
    """A reservation is named after the job that holds it (one per job)."""
    return f"rsv-{job_id}"


def worker_task_queue(worker_id: str) -> str:
    """Each worker agent polls its own queue, so a task only ever reaches the worker it was placed on."""
    return f"iris-worker-{worker_id}"


def agent_session_queue(worker_id: str, agent: str) -> str:
    """The queue of one agent process's liveness sessions. A second agent claiming the same worker id
    polls only its own such queue until it is accepted, so it can never take the first one's tasks
    (or its session activity) from the worker's queue. A worker id holds no "/", so no worker's own
    queue has this name."""
    return f"{worker_task_queue(worker_id)}/agent-{agent}"


def worker_workflow_id(worker_id: str, session: str) -> str:
    """One liveness monitor per agent session: a second agent claiming the same worker id starts its
    own and waits for its answer, never replacing the monitor of the agent already serving."""
    return f"iris-worker-{worker_id}-session-{session}"


def task_workflow_id(job_id: str, task_index: int) -> str:
    return f"{job_id}/task-{task_index}"


def task_workflow_ids(job_id: str, task_indices: Iterable[int]) -> Iterator[str]:
    """`task_workflow_id` of each index, built in C (a scheduler run loads 100,000s of them)."""
    return map(f"{job_id}/task-".__add__, map(str, task_indices))


def job_of_task(workflow_id: str) -> str:
    """The job workflow id of a task workflow id (the inverse of `task_workflow_id`)."""
    return workflow_id.rsplit("/task-", 1)[0]


JOB_ID_SEPARATOR = "/"
"""A child job's id is its parent's id, this, and a name of its own: ids read as paths (iris/client/child_jobs.py)."""


def parent_job_of(job_id: str) -> str:
    """The parent's id of a job id ("" for a root job, whose id holds no separator)."""
    return job_id.rsplit(JOB_ID_SEPARATOR, 1)[0] if JOB_ID_SEPARATOR in job_id else ""


def result_blob_key(job_id: str, task_index: int, attempt: int) -> str:
    """Where a callable task's return value is stored; per attempt, so a failed attempt's leftovers
    never pass for a later attempt's outcome."""
    return f"jobs/{job_id}/results/task-{task_index}/attempt-{attempt}"


def launch_blob_key(job_id: str) -> str:
    """Where a job's command, env and setup are stored when too big to copy into each task."""
    return f"jobs/{job_id}/launch"


INLINE_LAUNCH_BYTES = 2_048
"""A job's argv + env + setup up to this size ride inline in every task's input; bigger ones are
stored once and referenced, so a 10,000-task job does not copy them 10,000 times into histories."""


RUN_TASK = "run_task"
STOP_TASK = "stop_task"  # on the worker's queue: SIGTERM a running attempt, SIGKILL after a grace (an eviction)
WORKER_SESSION = "worker_session"
DELIVER_SIGNALS = "deliver_signals"
# Activity: the scheduler's announcement; an assignment whose task has not started within a short
# grace comes back as late (DeliveryOutcome) instead of holding the scheduler's loop while it waits.
DELIVER_ASSIGNMENTS = "deliver_assignments"
REBUILD_SCHEDULER = "rebuild_scheduler"  # activity: a scheduler that started empty asks everyone to report
FIND_LOST_TASKS = "find_lost_tasks"  # activity: a job's adopted tasks whose workflow closed without reporting
# Activities on a worker's own queue that reach into one of its running tasks (worker_agent.task_access),
# run by a TaskAccessWorkflow the client starts: `iris task exec` and `iris task profile`.
EXEC_IN_TASK = "exec_in_task"
PROFILE_TASK = "profile_task"
KILL_DESCENDANTS = "kill_descendants"  # activity: kill the unfinished jobs of an ended job's tree
FIND_ENDED_JOBS = "find_ended_jobs"  # activity: reserving jobs that ended without releasing their reservation
AWAIT_JOB = "await_job"  # activity: wait for a job to end and return its state (a dependency, `after=`)

# -- signals, updates and queries, by the workflow that receives them: every handler and sender uses these.
# SchedulerWorkflow
UNVERSIONED_BUILD_ID = "iris-unversioned"
"""The build id of Temporal workers on unversioned queues (an agent's, the controller's waits): named, so the SDK
does not digest every loaded module's code at each start to make one up."""

ENQUEUE = "enqueue"  # one job's (or one retried task's) tasks to place
ENQUEUE_BATCH = "enqueue_batch"  # a list of enqueues, coalesced by deliver_signals
CLAIM = "claim"  # a task holds a place a scheduler that started empty does not know of
RELEASE = "release"  # an attempt ended: its place is free
RELEASE_BATCH = "release_batch"  # a list of Release, coalesced by an agent whose tasks ended
REGISTER_WORKERS = "register_workers"  # one agent's hosts (a WorkerBatch), answered by REGISTERED
REGISTER_WORKER_BATCHES = "register_worker_batches"  # agents' batches handed on by the registrar (a WorkerBatches)
WORKER_LOST = "worker_lost"  # a liveness session ended
CORDON_WORKERS = "cordon_workers"  # no new work on these workers (or again)
REMOVE_WORKERS = "remove_workers"  # these workers are gone for good
CONFIGURE_SCHEDULER = "configure"  # the blob store's URL, from the controller
RESERVE = "reserve"  # a job's reservation (a Reserve): hold it for the job's tree while the job runs
RELEASE_RESERVATION = "release_reservation"  # the reserving job ended (its job id): give the capacity back
CONFIGURE_SHARING = "configure_sharing"  # the cluster's sharing settings (a SharingSettings), from the controller
SET_CREDITS = "set_credits"  # an operator sets a user's balance (a SetCredits)
HEADROOM = "headroom"  # what each scale group can still bring, from the autoscaler when it changes
SCHEDULER_NOT_WHOLE = "iris: the scheduler's state is not whole"
"""The start of a query's refusal by a scheduler run that is loading the state its previous run carried over, or
that handed it to the next: a partial answer would list part of the fleet as if it were all of it. Iris clients
ask again (iris/query_retry.py)."""
SUMMARY_QUERY = "summary"  # counts of workers and tasks (ClusterSummary)
WORKERS_QUERY = "workers"  # every worker with its capacity and placed tasks (WorkerList)
AUTOSCALE_SNAPSHOT_QUERY = "autoscale_snapshot"  # a compressed SchedulingSnapshot (activities/proto/compressed.py)
RECENT_ACTIONS_QUERY = "recent_actions"  # the scheduler's last placements, requeues and cordons, oldest first
DASHBOARD_WORKERS_QUERY = "dashboard_workers"  # one filtered page of workers, with counts (DashboardWorkers)
DASHBOARD_WORKER_QUERY = "dashboard_worker"  # one worker with all its running tasks (WorkerStatus)
DASHBOARD_QUEUE_QUERY = "dashboard_queue"  # the summary and the snapshot in one answer (DashboardQueue)
# TaskWorkflow
# ASSIGNED (above): the task's place
UNSCHEDULABLE = "unschedulable"  # its scheduling timeout passed
SCHEDULER_RESTARTED = "scheduler_restarted"  # a scheduler that started empty: enqueue again, or claim your place
EVICT = "evict"  # stop this attempt for higher-band work (an Evict): a preemption, not a failure
TASK_STATUS_QUERY = "status"
# JobWorkflow
TASK_STARTED = "task_started"  # the agent started a task's process (a TaskStarted)
TASK_RETRYING = "task_retrying"  # a task goes back to the queue
TASK_ENDED = "task_ended"  # one task's result (a TaskResult), for a job that continues as new
PENDING_REASON = "pending_reason"  # why the job's pending tasks wait ("" once they can be placed)
EFFECTIVE_BAND = "effective_band"  # the band the scheduler schedules the job in (batch: its user has no credits)
KILL_JOB = "kill"  # terminate the job (the reason)
CHILD_STARTED = "child_started"  # a child job started (its id): the job's end must sweep its tree
JOB_STATUS_QUERY = "job_status"  # the job, a summary past 2,000 tasks (workflows/jobs/job_summary.py)
JOB_TASKS_QUERY = "job_tasks"  # task rows start..stop, zlib(JobStatus) (workflows/jobs/job_summary.py)
# RegistrarWorkflow
# REGISTER_WORKERS (above): one agent's hosts, handed on to the scheduler
# WorkerWorkflow
REGISTERED = "registered"  # the scheduler's answer to REGISTER_WORKERS (a RegistrationReply)
REGISTER_AGAIN = "register_again"  # a scheduler that started empty: send the session's registration again
REGISTRATION_UPDATE = "registration"  # the agent waits here for the scheduler's answer
# AutoscalerWorkflow and SliceWorkflow
CONFIGURE_AUTOSCALER = "configure"  # the scale groups, from the controller
SLICE_STATE = "slice_state"  # a slice moved (a SliceUpdate)
SCALE_DOWN = "scale_down"  # a slice should go (a ScaleDown)
WAKE_AUTOSCALER = "wake"  # from the scheduler: a pass left jobs unplaced that were not before (their count)
MAX_RELEASE_BATCH = 1_000  # releases per signal (~70 KB of JSON)


class RuntimeName(StrEnum):
    """How a worker runs a task: a host process, or a container through Docker or containerd's CRI.

    The one list of runtime names: the CLI, the config schema, scale groups and the agent's runtime
    modules all take their names from here.
    """

    PROCESS = "process"
    DOCKER = "docker"
    CONTAINERD = "containerd"


DEFAULT_PORT_RANGE = (20_000, 29_999)
"""Ports a worker offers its tasks unless told otherwise: below Linux's ephemeral range (32768-60999),
so a port handed out is not one the kernel just gave an outgoing connection."""


@dataclass
class TaskNetwork:
    """Where a task of a distributed job runs and who its peers are, decided when it was placed.

    The agent turns it into the task's environment (worker_agent.distributed_env) and publishes
    its named ports as endpoints (TaskStarted).
    """

    address: str = ""  # the task's host, as other hosts reach it
    ports: dict[str, int] = field(default_factory=dict)  # port name -> port allocated on that host
    coordinator: str = ""  # "host:port" of task 0's coordinator port ("" = not known at placement)
    slice_hosts: list[str] = field(default_factory=list)  # a TPU gang: its slice's hosts, in host order
    slice_host_index: int = -1  # this task's host in `slice_hosts`
    megascale_coordinator: str = ""  # a multi-slice gang: "host:port" on slice 0's first host (task 0's)


@dataclass
class KillDescendants:
    """`kill_descendants`' input: the job that ended, how, and the children it heard of most recently.

    `recent_children` are signalled by id as well as found in visibility, which may lag a child
    that started a moment before its parent ended.
    """

    job_id: str
    state: str
    recent_children: list[str] = field(default_factory=list)


@dataclass
class RunTaskInput:
    """One attempt of one task, dispatched to the worker the scheduler chose."""

    job_id: str
    task_index: int
    num_tasks: int
    attempt: int
    worker_id: str
    argv: list[str] = field(default_factory=list)  # a command, or empty for a shipped callable
    function_blob: str = ""                         # blob key of cloudpickle((fn, args, kwargs))
    result_blob: str = ""                           # where a callable's return value goes
    env: dict[str, str] = field(default_factory=dict)
    image: str = ""
    job_workflow_id: str = ""                       # told when the process starts
    cpu_millis: int = 0                             # the job's request; container runtimes enforce it
    memory_bytes: int = 0                           # (0 = no limit)
    bundle_blob: str = ""                           # the job's code bundle (zip): the task's working directory
    setup: list[str] = field(default_factory=list)  # shell commands run once per job and host, first
    launch_blob: str = ""                           # argv, env and setup stored apart (pb.Launch)
    num_slices: int = 0                             # > 1: a multi-slice gang (task i on slice i // hosts)
    network: TaskNetwork | None = None              # ports, coordinator and peers (a distributed job)
    namespace: str = ""                             # the job's namespace (IRIS_NAMESPACE)
    reservation_id: str = ""                        # the reservation of the task's tree (IRIS_RESERVATION_ID)


PROCESS_STARTED = "process-started"
"""`run_task`'s heartbeat detail once the task's process runs: a heartbeat timeout without it means the
attempt never started anything, so the task workflow re-queues it as a dispatch failure."""
LEASED = "leased"
"""`run_task`'s heartbeat detail before the process starts: the attempt holds a lease (docs/reliability.md)."""
LEASE_KEY = "lease_seconds"  # a heartbeat's lease detail: {LEASE_KEY: seconds, LEASE_MARGIN_KEY: seconds}
LEASE_MARGIN_KEY = "lease_margin_seconds"
LEASE_EXPIRED = "LeaseExpired"  # ApplicationError type of an attempt its agent's lease watchdog killed
ATTEMPT_STOPPED = "AttemptStopped"  # ApplicationError type of an attempt its lease's beat found cancelled or gone
LEASE_EXPIRED_REASON = "lease expired: the worker stopped renewing it"

# How long Temporal lets a task attempt go without a heartbeat before it is lost: the agent's to say
# (`iris worker serve --heartbeat-timeout`), declared when it registers and handed to each attempt
# placed on it. How fast a dead host is noticed is a property of the host and its link.
DEFAULT_HEARTBEAT_TIMEOUT_SECONDS = 10.0
MIN_HEARTBEAT_TIMEOUT_SECONDS = 2.0  # below this, a loaded host's scheduling hiccup looks like a dead one
MAX_HEARTBEAT_TIMEOUT_SECONDS = 600.0


def heartbeat_timeout_seconds(declared: float) -> float:
    """The heartbeat timeout an agent declared, or the default when it declared none (an older agent: 0)
    or one out of range (refused at registration; read defensively here, as workflows must not fail)."""
    if MIN_HEARTBEAT_TIMEOUT_SECONDS <= declared <= MAX_HEARTBEAT_TIMEOUT_SECONDS:
        return float(declared)
    return DEFAULT_HEARTBEAT_TIMEOUT_SECONDS


@dataclass
class RunTaskResult:
    """How the attempt ended. A non-zero exit is an expected outcome, not an exception."""

    exit_code: int
    error: str = ""
    result_blob: str = ""
    released: bool = False  # the agent already gave the capacity back to the scheduler
    started: bool = True  # False when the process never started (it could not be prepared or launched)
    # What the attempt's processes used, sampled while they ran (worker_agent.usage).
    peak_memory_bytes: int = 0
    cpu_seconds: float = 0.0
    run_seconds: float = 0.0
    # Why the attempt was stopped for its host's preemption notice ("" = it was not): a preemption,
    # whatever its exit code (worker_agent.preemption).
    preempted: str = ""


@dataclass
class TaskAccessInput:
    """`iris task exec|profile`: what to run against one running task, on the worker it runs on.

    Output goes to the log store under `task_access_log_url`, job id `access_id`, as it comes, so
    the client streams it; a profile's flame graph is stored as the blob `profile_blob_key(access_id)`.
    """

    activity: str  # EXEC_IN_TASK or PROFILE_TASK
    access_id: str
    job_id: str
    task_index: int
    worker_id: str
    argv: list[str] = field(default_factory=list)  # exec: the command
    duration_seconds: float = 10.0  # profile: how long to sample


@dataclass
class TaskAccessResult:
    """How an exec or profile ended: the command's exit code, or a one-line error (exit code -1)."""

    exit_code: int
    error: str = ""


def task_access_log_url(store_url: str) -> str:
    """Where `iris task exec` output is streamed: a log store beside the tasks' own."""
    return f"{store_url.rstrip('/')}/task-access-logs"


def profile_blob_key(access_id: str) -> str:
    return f"task-access/{access_id}/profile.svg"


@dataclass
class Release:
    """A task attempt no longer needs its place: dequeue it or free its capacity. Idempotent.

    Sent by the agent when a task's process exits (the fast path) and by the
    task workflow on every other path.
    """

    job_id: str
    task_index: int
    attempt: int
    dispatch_failed_on: str = ""  # the worker that never picked this attempt up, if that is why
    dispatch_failed_session: str = ""  # its agent session then ("" = any): a restarted agent is not blamed
    ran_seconds: float = -1.0  # how long the process ran, as its agent measured it (-1: not known); charged


@dataclass
class StopTask:
    """Stop one running attempt on this worker: SIGTERM, then SIGKILL after `grace_seconds` (an eviction).

    Its run_task then ends as usual, with the signal's exit; `stop_task` returns False when the attempt
    does not run here (not started yet, or over), and the task workflow cancels the attempt instead.
    With `kill`, the attempt's job killed it: the agent's own kill grace, no notice, not a preemption. The
    task workflow sends it beside the cancellation, which an agent hears of only with its next heartbeat.
    """

    job_id: str
    task_index: int
    attempt: int
    grace_seconds: float
    reason: str = ""  # why (the task's IRIS_PREEMPTION_NOTICE_FILE says it)
    kill: bool = False


@dataclass
class TaskStarted:
    """Signal from the agent to the job: the task's process is running."""

    task_index: int
    attempt: int
    worker_id: str
    endpoints: dict[str, str] = field(default_factory=dict)  # port name -> "host:port", while it runs


@dataclass
class WorkerSessionInput:
    """The liveness session of one agent process: the host it runs for, and any more it serves.

    An agent that registers through `register_workers` sets `announced`: its
    WorkerWorkflow then takes the scheduler's `registered` reply and hands it to
    the agent through the `registration` update. One session may cover many hosts
    (`more_worker_ids`, heartbeating on `task_queue`): N missed beats make all of
    them lost at once, which is how one process can carry a thousand simulated hosts.
    """

    worker_id: str
    session: str
    announced: bool = False
    more_worker_ids: list[str] = field(default_factory=list)
    task_queue: str = ""  # where the session activity runs; default: the worker's own queue
    # base64 of the WorkerBatch the agent registered: sent again when a scheduler that started
    # empty asks (`register_again`), so it learns the fleet without waiting for agents to restart.
    registration: str = ""
    # The agent's heartbeat timeout (`--heartbeat-timeout`); the session's is 0.6 x that (6 s at the
    # default 10 s). 0: an older agent, the default.
    heartbeat_timeout_seconds: float = 0.0


@dataclass
class Delivery:
    """One signal for `deliver_signals` to send: the target workflow, the signal's name, its one argument.

    `arg` travels as the JSON of its dataclass and is typed again by the receiver's handler.
    """

    workflow_id: str
    signal: str
    arg: Any


@dataclass
class DeliveryOutcome:
    """What became of a batch of deliveries, by index: the ones whose workflow no longer runs, and
    the assignments to tasks that do not exist yet while their job runs (delivered later, apart)."""

    gone: list[int] = field(default_factory=list)
    late: list[int] = field(default_factory=list)


@dataclass
class LostTask:
    """A task whose workflow closed without reporting its end to the job: terminated, failed, timed out."""

    index: int
    status: str  # the workflow's execution status, e.g. "TERMINATED"
