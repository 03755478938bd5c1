"""The fleet as a user sees it: slices, the autoscaler's per-group status, cordoning and draining workers.

Slices are read from Temporal's visibility (the `IrisSliceState` search attribute
and each slice workflow's memo), not by querying workflows, so listing them costs
the controller nothing. Changes go through signals: a slice's `scale_down`, the
scheduler's `cordon_workers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import (
    AUTOSCALER_WORKFLOW_ID,
    CORDON_WORKERS,
    SCALE_DOWN,
    SCHEDULER_WORKFLOW_ID,
    SLICE_STATE_ATTRIBUTE,
    WORKERS_QUERY,
)
from activities.contracts.worker_pages import all_workers
from activities.proto import cluster_pb2 as pb
from iris.types import SliceState, SliceStatus
from workflows.fleet.autoscaler_state import AutoscalerStatus
from workflows.fleet.slice_lifecycle import TERMINAL_SLICE_STATES
from workflows.fleet.slice_workflow import ScaleDown
from workflows.messages import CordonWorkers

SLICE_STATE = SearchAttributeKey.for_keyword(SLICE_STATE_ATTRIBUTE)
QUERY_TIMEOUT = timedelta(seconds=5)


async def list_slices(client: Client, include_ended: bool = False) -> list[SliceStatus]:
    """Slices, newest first: the live ones, or every one Temporal still keeps with `include_ended`.

    A slice is live until it reaches a final state: its workflow records TERMINATED or FAILED a moment
    before it closes, and a slice listed TERMINATED with `include_ended` is not listed live meanwhile."""
    query = "WorkflowType='SliceWorkflow'" + ("" if include_ended else " AND ExecutionStatus='Running'")
    out = []
    async for wf in client.list_workflows(query):
        status = slice_status(wf, await wf.memo())
        if include_ended or status.state not in TERMINAL_SLICE_STATES:
            out.append(status)
    return out


def slice_status(wf: WorkflowExecution, memo: Mapping[str, Any]) -> SliceStatus:
    """A slice as visibility holds it: its state search attribute and its workflow's memo."""
    raw = wf.typed_search_attributes.get(SLICE_STATE) or SliceState.CREATING
    state = SliceState(raw) if raw in SliceState.__members__ else SliceState.CREATING
    error = str(memo.get("error", ""))
    if wf.status != WorkflowExecutionStatus.RUNNING and state not in TERMINAL_SLICE_STATES:
        # ended without reaching a final state (terminated by hand): orphan cleanup deletes what is left
        state, error = SliceState.FAILED, error or f"slice workflow {wf.status.name.lower() if wf.status else ''}"
    return SliceStatus(
        slice_id=wf.id,
        scale_group=str(memo.get("scale_group", "")),
        state=state,
        hosts=tuple(memo.get("hosts", ())),
        worker_ids=tuple(memo.get("worker_ids", ())),
        created_at=float(memo.get("created_at", 0.0) or wf.start_time.timestamp()),
        error=error,
    )


async def terminate_slice(client: Client, slice_id: str, drain_timeout: float = 0.0) -> bool:
    """Scale a slice down now (its running tasks are retried elsewhere unless `drain_timeout` lets them finish).

    False if it had already ended; KeyError if there is no such slice.
    """
    handle = client.get_workflow_handle(slice_id)
    try:
        desc = await handle.describe()
        if desc.workflow_type != "SliceWorkflow":
            raise KeyError(f"no such slice: {slice_id}")
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return False
        await handle.signal(SCALE_DOWN, ScaleDown("terminated by user", drain_timeout))
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise KeyError(f"no such slice: {slice_id}") from None
        raise
    return True


async def cordon_worker(client: Client, worker_id: str, cordoned: bool = True, reason: str = "") -> pb.WorkerStatus:
    """Place no new work on the worker (running tasks go on); `cordoned=False` undoes it. KeyError if unknown."""
    scheduler = client.get_workflow_handle(SCHEDULER_WORKFLOW_ID)
    workers = await all_workers(
        lambda after: scheduler.query(WORKERS_QUERY, after, result_type=pb.WorkerList, rpc_timeout=QUERY_TIMEOUT)
    )
    found = next((w for w in workers if w.worker_id == worker_id), None)
    if found is None:
        raise KeyError(f"no such worker: {worker_id}")
    what = "cordoned" if cordoned else "uncordoned"
    await scheduler.signal(CORDON_WORKERS, CordonWorkers([worker_id], cordoned, reason or f"{what} by user"))
    return found


async def autoscaler_status(client: Client) -> AutoscalerStatus | None:
    """Each scale group's slices by state and why it is not scaling up; None when no autoscaler runs."""
    try:
        return await client.get_workflow_handle(AUTOSCALER_WORKFLOW_ID).query(
            "status", result_type=AutoscalerStatus, rpc_timeout=QUERY_TIMEOUT
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
