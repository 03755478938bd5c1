"""Registering hosts with the scheduler without an update on the singleton.

The agent starts its WorkerWorkflow (the liveness monitor) first, then signals
the scheduler `register_workers` with a batch of hosts and that workflow as
`reply_to`, and waits on the monitor's `registration` update for the answer.
Signals have no in-flight limit, so 10,000 agents registering at once queue
nothing on the singleton; a refusal still comes back with its reason. The
signal is sent again if no answer comes (registering is idempotent).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.service import RPCError

from activities.contracts import (
    CONTROL_TASK_QUEUE,
    KIND_ATTRIBUTE,
    SCHEDULER_WORKFLOW_ID,
    WORKER_KIND,
    WorkerSessionInput,
    worker_workflow_id,
)
from activities.proto import cluster_pb2 as pb

WORKER_WORKFLOW = "WorkerWorkflow"  # started by name: the agent does not import workflow code
REGISTER_WORKERS = "register_workers"
REGISTRATION_UPDATE = "registration"
ANSWER_WAIT_SECONDS = 20.0  # ask again after this long without an answer


async def register_hosts(
    client: Client, session: WorkerSessionInput, hosts: list[pb.WorkerMetadata], timeout: float = 120.0
) -> dict[str, str]:
    """Register `hosts` under one liveness session; the refused ones, worker id -> reason.

    RuntimeError if Temporal or the scheduler does not answer within `timeout` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    monitor_id = worker_workflow_id(session.worker_id, session.session)
    batch = pb.WorkerBatch(workers=hosts, reply_to=monitor_id)
    session = dataclasses.replace(session, registration=base64.b64encode(batch.SerializeToString()).decode())
    delay = 0.2
    monitor_started = False
    while True:
        try:
            if not monitor_started:
                # The liveness monitor starts first: a worker is never registered without one,
                # so an agent that dies right after registering is still reported lost. Asking
                # again (a lost answer) finds this session's monitor already there.
                await client.start_workflow(
                    WORKER_WORKFLOW,
                    session,
                    id=monitor_id,
                    task_queue=CONTROL_TASK_QUEUE,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    search_attributes=TypedSearchAttributes(
                        [SearchAttributePair(SearchAttributeKey.for_keyword(KIND_ATTRIBUTE), WORKER_KIND)]
                    ),
                    static_summary=f"worker {session.worker_id}" + (
                        f" and {len(session.more_worker_ids)} more" if session.more_worker_ids else ""
                    ),
                )
                monitor_started = True
            await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).signal(REGISTER_WORKERS, batch)
            wait = max(1.0, min(ANSWER_WAIT_SECONDS, deadline - loop.time()))
            reply = await asyncio.wait_for(
                client.get_workflow_handle(monitor_id).execute_update(REGISTRATION_UPDATE, result_type=dict),
                wait,
            )
            refused = reply.get("refused", {}) if isinstance(reply, dict) else {}
            return {str(k): str(v) for k, v in refused.items()}
        except (RPCError, TimeoutError, WorkflowUpdateFailedError) as err:
            if loop.time() > deadline:
                raise RuntimeError(f"could not reach the Iris scheduler: {err}") from err
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
