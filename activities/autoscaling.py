"""The autoscaler's side effects: read the scheduler's demand and plan, start slice workflows, recover slices.

`autoscale_plan` is a local activity: it asks the scheduler for its compact
snapshot (the `autoscale_snapshot` query), decodes it as the scheduling activity
does and runs the pure `scheduler.autoscale.plan_scaling`. Only the small plan
goes into the autoscaler's history.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import structlog
from temporalio import activity
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.service import RPCError

from activities.contracts import (
    AUTOSCALE_SNAPSHOT_QUERY,
    CONTROL_TASK_QUEUE,
    KIND_ATTRIBUTE,
    SCHEDULER_WORKFLOW_ID,
    SLICE_KIND,
    SLICE_STATE_ATTRIBUTE,
)
from activities.contracts.fleet import (
    AUTOSCALE_PLAN,
    KNOWN_SLICES,
    START_SLICE,
    GroupInput,
    KnownSlice,
    PlanInput,
    PlanResult,
    StartSlice,
)
from activities.heartbeat import heartbeating
from activities.scheduling import decode_snapshot
from scheduler.autoscale import GroupShape, SliceView, headroom, plan_scaling
from scheduler.types import Resources

log = structlog.get_logger("iris.autoscaler")

# How long a plan waits for the scheduler's snapshot; past it the tick is skipped ("scheduler not answering") and
# the next asks again. A plan also gives up as soon as its controller begins to stop (`_snapshot`): the stopping
# worker takes no more workflow tasks, so the scheduler's next one, which the query may wait for, would not run here,
# and this local activity holds the autoscaler's workflow task, which the worker's shutdown waits for. Unbounded,
# the controller's stop ran out its grace and was SIGKILLed (`iris cluster down` took 10 s in 2 of 5 runs of
# tests/e2e/test_multislice_autoscale.py).
SNAPSHOT_QUERY_TIMEOUT = timedelta(seconds=5)

SLICE_STATE = SearchAttributeKey.for_keyword(SLICE_STATE_ATTRIBUTE)
KIND = SearchAttributeKey.for_keyword(KIND_ATTRIBUTE)


def group_shape(g: GroupInput) -> GroupShape:
    s = g.spec
    return GroupShape(
        name=s.name,
        hosts_per_slice=s.hosts_per_slice,
        host_capacity=Resources(cpu_millis=s.cpu_millis, memory_bytes=s.memory_bytes, gpus=s.gpus, tpus=s.tpus),
        attributes=dict(s.attributes),
        min_slices=g.min_slices,
        max_slices=g.max_slices,
        scale_up_delay=g.scale_up_delay,
        scale_down_delay=g.scale_down_delay,
        last_scale_up=g.last_scale_up,
        backoff_until=g.backoff_until,
        backoff_reason=g.backoff_reason,
        buffer_slices=g.buffer_slices,
    )


def _headroom_row(shape: GroupShape, slices: int) -> list[Any]:
    """One group's headroom as the scheduler keeps it (workflows.scheduler.sharing_state.Books.headroom)."""
    r = shape.host_capacity
    return [shape.name, slices, shape.hosts_per_slice, [r.cpu_millis, r.memory_bytes, r.gpus, r.tpus],
            dict(shape.attributes)]  # fmt: skip


async def _snapshot(client: Client) -> bytes | None:
    """The scheduler's compact snapshot, or None when this controller begins to stop before it comes."""
    scheduler = client.get_workflow_handle(SCHEDULER_WORKFLOW_ID)
    query = asyncio.ensure_future(
        scheduler.query(AUTOSCALE_SNAPSHOT_QUERY, result_type=bytes, rpc_timeout=SNAPSHOT_QUERY_TIMEOUT)
    )
    stopping = asyncio.ensure_future(activity.wait_for_worker_shutdown())
    try:
        await asyncio.wait({query, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        stopped = not query.done()
        if stopped:
            query.cancel()
    return None if stopped else query.result()


@activity.defn(name=AUTOSCALE_PLAN)
async def autoscale_plan(inp: PlanInput) -> PlanResult:
    """Read the scheduler's snapshot and plan this tick's scale-ups and scale-downs."""
    try:
        data = await _snapshot(activity.client())
    except RPCError as e:
        return PlanResult(error=f"scheduler not answering: {e.message}")
    except WorkflowQueryFailedError as e:  # e.g. a new run still loading its carried state: next tick
        return PlanResult(error=f"scheduler not answering: {e}")
    if data is None:
        return PlanResult(error="controller stopping")
    workers, pending = decode_snapshot(data)
    shapes = [group_shape(g) for g in inp.groups]
    views = [SliceView(s.slice_id, s.group, s.state, tuple(s.worker_ids), s.idle_since) for s in inp.slices]
    plan = plan_scaling(shapes, views, pending, workers, inp.now)
    room = {h.group: h.slices for h in headroom(shapes, views, inp.now)}
    return PlanResult(
        create=dict(plan.create),
        remove=list(plan.remove),
        idle_since=dict(plan.idle_since),
        unmet=dict(plan.unmet),
        group_reasons=dict(plan.group_reasons),
        pending_jobs=len(pending),
        recheck_after=plan.recheck_after,
        headroom=[_headroom_row(s, room[s.name]) for s in shapes if room.get(s.name, 0) > 0],
    )


@activity.defn(name=START_SLICE)
async def start_slice_workflow(req: StartSlice) -> None:
    """Start the slice's workflow with id = slice id; a retried start finds the first one, never a second."""
    client = activity.client()
    start = client.start_workflow(
        "SliceWorkflow",
        req.workflow_input,
        id=req.slice_id,
        task_queue=CONTROL_TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(KIND, SLICE_KIND)]
        ),
        static_summary=req.summary,
    )
    await heartbeating(start)
    log.info("slice.workflow_started", slice_id=req.slice_id)


async def running_slices(client: Client) -> list[KnownSlice]:
    """Every running SliceWorkflow, from visibility (state from its search attribute, ids from its memo)."""
    found = []
    async for wf in client.list_workflows("WorkflowType='SliceWorkflow' AND ExecutionStatus='Running'"):
        memo = await wf.memo()
        state = wf.typed_search_attributes.get(SLICE_STATE) or "CREATING"
        found.append(KnownSlice(wf.id, str(memo.get("scale_group", "")), state,
                                list(memo.get("worker_ids", []))))  # fmt: skip
    return found


@activity.defn(name=KNOWN_SLICES)
async def known_slices() -> list[KnownSlice]:
    """Running slices, for an autoscaler that starts without carried-over state."""
    return await heartbeating(running_slices(activity.client()))
