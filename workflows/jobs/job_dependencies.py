"""A job that waits for other jobs (`after=`): a durable wait in its own workflow, before it is queued.

(Also where a job started by a schedule's firing takes its name and submission time.)

Why an activity per dependency and not a signal from the dependency: a signal needs the dependency to
know its dependents, which races with a dependency that ends while the dependent registers (and with
one that has ended already). The `await_job` activity (activities/dependencies.py) long-polls the
dependency's result through Temporal, which answers at once for a job that has ended and follows its
continue-as-new runs. It heartbeats, so a controller that dies mid-wait hands it to another within the
heartbeat timeout; it is retried forever with back-off, so a Temporal server that restarts loses
nothing. A waiting job costs no timers and no history events while it waits (heartbeats add none):
no timer storm in the scheduler, no polling loop in a client. The job's tasks are not started, the
scheduler never hears of it, and its pending reason names what it waits for.

Pure helpers (`accepts`, `waiting_reason`) are shared with the client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.contracts import AWAIT_JOB, WAIT_TASK_QUEUE
    from activities.proto import cluster_pb2 as pb
    from workflows.states import JobState
    from workflows.visibility import JOB_NAME

SUCCEEDED_RULE = "succeeded"
ENDED_RULE = "ended"
AFTER_RULES = (SUCCEEDED_RULE, ENDED_RULE)

AWAIT_HEARTBEAT = timedelta(seconds=10)
"""A controller that dies mid-wait: the wait resumes on another this long after its last heartbeat (a slice step's
is of this order; it was 20 s). The SDK forwards at most one heartbeat per 0.8 x this, 8 s: 0.125 heartbeat calls
a second per waiting dependency, a quarter of a running task's ~0.5 (125/s at 1,000 waiting, was 62.5/s)."""
AWAIT_ATTEMPT = timedelta(days=1)  # one attempt's bound; the wait itself has none (retried forever)
AWAIT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))


def accepts(rule: str, state: str) -> bool:
    """Whether a dependency that ended in `state` lets a job with `rule` run."""
    if (rule or SUCCEEDED_RULE) == ENDED_RULE:
        return True
    return state == JobState.SUCCEEDED


def waiting_reason(ids: Sequence[str], rule: str) -> str:
    """The pending reason of a job waiting for the jobs `ids` (not queued yet)."""
    rule = rule or SUCCEEDED_RULE
    what = "succeed" if rule == SUCCEEDED_RULE else "end"
    names = ids[0] if len(ids) == 1 else ", ".join(ids[:-1]) + " and " + ids[-1]
    return f"waiting for job{'s' if len(ids) > 1 else ''} {names} to {what} (after_rule={rule})"


def refusal(job_id: str, state: str, rule: str) -> str:
    """The error of a job whose dependency `job_id` ended in `state`, which its rule does not accept."""
    return f"dependency {job_id} ended {state}; after_rule={rule or SUCCEEDED_RULE} needs SUCCEEDED"


def cancelled_reason() -> str:
    """Why a job cancelled from outside Iris ends KILLED: Temporal's reason when it gave one (a schedule's
    `overlap="cancel_other"`: "cancelled by schedule overlap policy"; a reason typed in the Temporal UI)."""
    return workflow.cancellation_reason() or "job workflow cancelled"


def show_job_control(status: pb.JobStatus, req: pb.JobRequest, *, waiting: bool) -> None:
    """What the job's status shows of its job-control options (and, `waiting` for them, why it waits)."""
    status.after.extend(req.after)
    status.after_rule = req.after_rule
    status.max_concurrent = req.max_concurrent
    if req.after and waiting:
        status.pending_reason = waiting_reason(list(req.after), req.after_rule)
    if req.schedule and not req.submitted_at:  # a schedule's firing (iris/client/schedules.py) started this job
        job_id = workflow.info().workflow_id  # `<schedule>-<fire time>`: Temporal appended the time
        req.name, req.submitted_at = job_id, workflow.now().timestamp()
        status.name, status.submitted_at = job_id, req.submitted_at
        workflow.upsert_search_attributes([JOB_NAME.value_set(job_id)])


async def await_dependencies(
    req: pb.JobRequest,
    status: pb.JobStatus,
    *,
    killing: Callable[[], str | None],
    on_cancel: Callable[[], None],
    changed: Callable[[], None],
) -> tuple[JobState, str] | None:
    """None once every dependency ended as the rule accepts; else how the job ends, and why.

    Ends KILLED when the job is killed while it waits (`killing()` gives the reason once it is),
    UNSCHEDULABLE when a dependency ended in a state the rule refuses (its waits for the others are
    cancelled). `on_cancel` runs when the workflow is cancelled from outside; the status's pending
    reason follows the waits (`changed` after each change).
    """
    rule = req.after_rule or SUCCEEDED_RULE
    waits: dict[str, Any] = {
        dep: workflow.start_activity(
            AWAIT_JOB,
            dep,
            result_type=str,
            task_queue=WAIT_TASK_QUEUE,
            start_to_close_timeout=AWAIT_ATTEMPT,
            heartbeat_timeout=AWAIT_HEARTBEAT,
            retry_policy=AWAIT_RETRY,
        )
        for dep in req.after
    }
    outcome: tuple[JobState, str] | None = None
    while waits and outcome is None:
        try:
            await workflow.wait_condition(lambda: killing() is not None or any(h.done() for h in waits.values()))
        except asyncio.CancelledError:  # cancelled from outside (e.g. the Temporal UI): as `iris job kill`
            on_cancel()
        reason = killing()
        if reason is not None:
            outcome = (JobState.KILLED, reason or "killed while waiting for its dependencies")
            break
        for dep in [d for d, h in waits.items() if h.done()]:
            state = waits.pop(dep).result()
            if not accepts(rule, state):
                outcome = (JobState.UNSCHEDULABLE, refusal(dep, state, rule))
                break
        if waits and outcome is None:
            status.pending_reason = waiting_reason(list(waits), rule)
            changed()
    for handle in waits.values():
        handle.cancel()
    if outcome is not None:
        return outcome
    status.pending_reason = ""  # the scheduler's reason from here on
    # Queued from now: its place in the queue and its scheduling timeout count from here (Slurm's
    # eligible time), not from its submission.
    req.submitted_at = workflow.now().timestamp()
    changed()
    return None
