"""`iris controller serve`: the control-plane process (workflows + control activities).

Stateless: every durable fact is in Temporal, so this process can be killed
and restarted at any time. On start it makes sure the Iris search attributes
exist and that the singleton scheduler workflow runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal

import structlog
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.scheduling import find_assignments_activity
from workflows import ALL_WORKFLOWS
from workflows.ids import CONTROL_TASK_QUEUE, SCHEDULER_WORKFLOW_ID
from workflows.scheduler_workflow import SchedulerWorkflow

log = structlog.get_logger("iris.controller")

SEARCH_ATTRIBUTES = ("IrisJobState", "IrisJobName", "IrisUser")


async def ensure_search_attributes(client: Client) -> None:
    """Register Iris's keyword search attributes if the server lacks them (idempotent)."""
    existing = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    missing = [name for name in SEARCH_ATTRIBUTES if name not in existing.custom_attributes]
    if missing:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=client.namespace,
                    search_attributes={name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for name in missing},
                )
            )
        except RPCError as err:
            if "already" not in str(err).lower():
                raise
        log.info("search_attributes_added", names=missing)


async def ensure_scheduler(client: Client, store_url: str) -> None:
    handle = await client.start_workflow(
        SchedulerWorkflow.run,
        None,
        id=SCHEDULER_WORKFLOW_ID,
        task_queue=CONTROL_TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary="Iris scheduler (singleton)",
    )
    await handle.signal(SchedulerWorkflow.configure, store_url)


def control_worker(client: Client, executor: concurrent.futures.Executor) -> Worker:
    return Worker(
        client,
        task_queue=CONTROL_TASK_QUEUE,
        workflows=ALL_WORKFLOWS,
        activities=[find_assignments_activity],
        activity_executor=executor,
        max_concurrent_workflow_tasks=200,
    )


async def serve(address: str, namespace: str, store_url: str) -> None:
    client = await Client.connect(address, namespace=namespace)
    await ensure_search_attributes(client)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as executor:
        async with control_worker(client, executor):
            await ensure_scheduler(client, store_url)
            log.info("controller_serving", temporal=address, namespace=namespace, store=store_url)
            await stop.wait()
            log.info("controller_stopping")
