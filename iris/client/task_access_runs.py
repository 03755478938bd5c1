"""`iris task exec` and `iris task profile` through Temporal: start the TaskAccessWorkflow, stream its output.

The command's output is streamed through the log store: the agent appends to it as it comes and the
client reads what is new every STREAM_POLL_SECONDS until the workflow ends. A module of its own, loaded
by iris/client/task_exec.py only off team mode (where the Iris API runs it, iris/auth/api.py), so that a
team-mode client never loads the Temporal SDK.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from activities.contracts import (
    CONTROL_TASK_QUEUE,
    KIND_ATTRIBUTE,
    TASK_ACCESS_KIND,
    TaskAccessInput,
    TaskAccessResult,
    task_access_log_url,
)
from iris.client.iris_client import IrisClient
from worker_agent.object_store import Logs, open_log_store
from worker_agent.storage import LogCursor, StorageError

__all__ = ["run_access", "start_access"]

STREAM_POLL_SECONDS = 0.25
# With the client shutdown, an interrupted CLI exits within ~20 s whatever the server does.
CANCEL_TIMEOUT_SECONDS = 10.0
WORKFLOW = "TaskAccessWorkflow"
KIND = SearchAttributeKey.for_keyword(KIND_ATTRIBUTE)


async def start_access(temporal: Client, inp: TaskAccessInput) -> WorkflowHandle[Any, TaskAccessResult]:
    """Start the access workflow for `inp` (the CLI's path and the Iris API's in team mode alike)."""
    return await temporal.start_workflow(
        WORKFLOW, inp, id=f"iris-task-access-{inp.access_id}", task_queue=CONTROL_TASK_QUEUE,
        result_type=TaskAccessResult,
        search_attributes=TypedSearchAttributes([SearchAttributePair(KIND, TASK_ACCESS_KIND)]),
    )


def run_access(client: IrisClient, inp: TaskAccessInput, output: Callable[[bytes], object]) -> tuple[int, str]:
    """Run the access workflow for `inp`, passing its output to `output` as it comes; its exit code and error.

    Interrupted (Ctrl-C) at any point once the start was asked for, even before the server answered,
    the workflow is cancelled by its id, which stops the command on the worker.
    """
    logs = open_log_store(task_access_log_url(client.store_url))
    workflow_id = f"iris-task-access-{inp.access_id}"
    temporal = client._async.temporal
    try:
        handle = client._run(start_access(temporal, inp))
        ended = asyncio.run_coroutine_threadsafe(handle.result(), client._loop.loop)
        try:
            return _stream(logs, inp.access_id, ended, output)
        finally:
            ended.cancel()
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):
            client._loop.run(temporal.get_workflow_handle(workflow_id).cancel(), timeout=CANCEL_TIMEOUT_SECONDS)
        raise


def _stream(logs: Logs, access_id: str, ended: concurrent.futures.Future[TaskAccessResult],
            output: Callable[[bytes], object]) -> tuple[int, str]:  # fmt: skip
    """Pass the command's output on every STREAM_POLL_SECONDS until the workflow ends, then the rest."""
    cursor = LogCursor()
    while True:
        with contextlib.suppress(concurrent.futures.TimeoutError):
            ended.result(timeout=STREAM_POLL_SECONDS)
        final = ended.done()
        with contextlib.suppress(StorageError, FileNotFoundError):
            data, cursor = logs.read_new_bytes(access_id, 0, cursor, final=final)
            if data:
                output(data)
        if final:
            result = ended.result()
            return result.exit_code, result.error
