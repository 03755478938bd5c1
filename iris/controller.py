"""`iris controller serve`: the control-plane process (workflows + control activities).

Stateless: every durable fact is in Temporal, so this process can be killed
and restarted at any time. On start it makes sure the Iris search attributes
exist and that the singleton scheduler workflow runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import signal

import structlog
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.service import RPCError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.scheduling import find_assignments_activity
from activities.signals import deliver_signals
from workflows import ALL_WORKFLOWS
from workflows.ids import CONTROL_TASK_QUEUE, KIND_ATTRIBUTE, SCHEDULER_KIND, SCHEDULER_WORKFLOW_ID, SEARCH_ATTRIBUTES
from workflows.scheduler_workflow import SchedulerWorkflow

log = structlog.get_logger("iris.controller")
KIND = SearchAttributeKey.for_keyword(KIND_ATTRIBUTE)
INDEXED_TYPES = {
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT,
}



async def ensure_search_attributes(client: Client) -> None:
    """Register Iris's search attributes if the server lacks them (idempotent)."""
    existing = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    missing = [name for name in SEARCH_ATTRIBUTES if name not in existing.custom_attributes]
    if missing:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=client.namespace,
                    search_attributes={name: INDEXED_TYPES[SEARCH_ATTRIBUTES[name]] for name in missing},
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
        search_attributes=TypedSearchAttributes([SearchAttributePair(KIND, SCHEDULER_KIND)]),
        static_summary="Iris scheduler (singleton)",
    )
    await handle.signal(SchedulerWorkflow.configure, store_url)


# Iris's own workflow and data modules hold no mutable module state, so the sandbox may share
# them between workflow runs instead of re-importing them for each one (measured: about 40% of
# the controller's CPU per job went to those re-imports). Determinism is still checked by replay.
SANDBOX_PASSTHROUGH = ("workflows", "scheduler", "activities")


def control_worker(client: Client, executor: concurrent.futures.Executor) -> Worker:
    return Worker(
        client,
        task_queue=CONTROL_TASK_QUEUE,
        workflows=ALL_WORKFLOWS,
        activities=[find_assignments_activity, deliver_signals],
        activity_executor=executor,
        max_concurrent_workflow_tasks=200,
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
        ),
    )


async def connect(address: str, namespace: str, timeout: float = 60.0) -> Client:
    """Connect to Temporal, retrying while the server is not up yet (e.g. restarted together with us)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await Client.connect(address, namespace=namespace)
        except RuntimeError as err:  # the SDK raises RuntimeError when it cannot connect
            if loop.time() > deadline:
                raise
            log.warning("temporal_unreachable", temporal=address, error=str(err))
            await asyncio.sleep(1.0)


async def serve(address: str, namespace: str, store_url: str) -> None:
    """Serve until SIGTERM/SIGINT; a failed Temporal worker is replaced instead of ending the process."""
    client = await connect(address, namespace)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as executor:
        ready = False
        while not stop.is_set():
            worker = control_worker(client, executor)
            running = asyncio.create_task(worker.run())
            try:
                if not ready:
                    await ensure_search_attributes(client)
                    await ensure_scheduler(client, store_url)
                    ready = True
                    log.info("controller_serving", temporal=address, namespace=namespace, store=store_url)
                stopping = asyncio.ensure_future(stop.wait())
                await asyncio.wait({stopping, running}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
            except RPCError as err:  # Temporal went away while we set up: try again
                log.warning("controller_setup_failed", error=str(err))
                await asyncio.sleep(1.0)
            finally:
                if not running.done():
                    await worker.shutdown()
                with contextlib.suppress(BaseException):
                    await running
            if running.done() and not running.cancelled() and running.exception() is not None and not stop.is_set():
                log.error("control_worker_failed", error=str(running.exception()))
                await asyncio.sleep(1.0)
        log.info("controller_stopping")
