"""`iris task exec` and `iris task profile` on the client's side: find the task, run, stream, fetch.

The client starts a TaskAccessWorkflow (workflows/tasks/task_access_workflow.py), which runs the agent's
exec or profile activity on the worker the task runs on (the agent listens on nothing but its task
queue). The command's output is streamed through the log store: the agent appends to it as it
comes and the client reads what is new every STREAM_POLL_SECONDS until the workflow ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from activities.contracts import (
    CONTROL_TASK_QUEUE,
    EXEC_IN_TASK,
    KIND_ATTRIBUTE,
    PROFILE_TASK,
    TASK_ACCESS_KIND,
    TaskAccessInput,
    TaskAccessResult,
    profile_blob_key,
    task_access_log_url,
)
from iris.client.iris_client import IrisClient
from iris.types import JobState, TaskState, TaskStatus
from worker_agent.object_store import Logs, open_log_store
from worker_agent.storage import LogCursor, StorageError

__all__ = ["TaskAccessError", "exec_in_task", "find_running_task", "profile_task"]

STREAM_POLL_SECONDS = 0.25
# With the client shutdown, an interrupted CLI exits within ~20 s whatever the server does.
CANCEL_TIMEOUT_SECONDS = 10.0
WORKFLOW = "TaskAccessWorkflow"
KIND = SearchAttributeKey.for_keyword(KIND_ATTRIBUTE)


class TaskAccessError(Exception):
    """The task cannot be reached (not running, unknown index, ...): one line for the user."""


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    error: str = ""


def find_running_task(client: IrisClient, job_id: str, task_index: int) -> TaskStatus:
    """The task's row if the job and the task run; TaskAccessError saying which does not."""
    status = client.job_status(job_id)  # KeyError for an unknown job
    if status.state != JobState.RUNNING:
        raise TaskAccessError(f"job {job_id} is not running ({status.state})")
    if not 0 <= task_index < status.num_tasks:
        raise TaskAccessError(f"job {job_id} has no task {task_index} (its tasks are 0..{status.num_tasks - 1})")
    task = next((t for t in status.tasks if t.task_index == task_index), None)
    if task is None or task.state != TaskState.RUNNING or not task.worker_id:
        raise TaskAccessError(f"task {task_index} of job {job_id} is not running ({task.state if task else 'unknown'})")
    return task


async def start_access(temporal: Client, inp: TaskAccessInput) -> WorkflowHandle[Any, TaskAccessResult]:
    """Start the access workflow for `inp` (the CLI's path and the Iris API's in team mode alike)."""
    return await temporal.start_workflow(
        WORKFLOW, inp, id=f"iris-task-access-{inp.access_id}", task_queue=CONTROL_TASK_QUEUE,
        result_type=TaskAccessResult,
        search_attributes=TypedSearchAttributes([SearchAttributePair(KIND, TASK_ACCESS_KIND)]),
    )


def _run(client: IrisClient, inp: TaskAccessInput, output: Callable[[bytes], object]) -> Outcome:
    """Run the access workflow for `inp`, passing its output to `output` as it comes; how it ended.

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
            output: Callable[[bytes], object]) -> Outcome:  # fmt: skip
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
            return Outcome(result.exit_code, result.error)


def exec_in_task(client: IrisClient, job_id: str, task_index: int, argv: list[str],
                 output: Callable[[bytes], object]) -> Outcome:  # fmt: skip
    """Run `argv` in the running task's environment, streaming its output to `output`."""
    if not argv:
        raise TaskAccessError("name a command to run: iris task exec JOB -- CMD [ARG...]")
    if getattr(client._async, "remote", False):  # team mode: the Iris API runs it for the job's owner or an admin
        done = client._run(client._async.task_access(job_id, task_index, argv=argv))  # type: ignore[attr-defined]
        output(done["output"])
        return Outcome(done["exit_code"], done["error"])
    task = find_running_task(client, job_id, task_index)
    inp = TaskAccessInput(activity=EXEC_IN_TASK, access_id=uuid.uuid4().hex, job_id=job_id,
                          task_index=task_index, worker_id=task.worker_id, argv=list(argv))  # fmt: skip
    return _run(client, inp, output)


def profile_task(client: IrisClient, job_id: str, task_index: int, duration: float,
                 output: Callable[[bytes], object]) -> tuple[Outcome, bytes]:  # fmt: skip
    """Profile the task's Python process for `duration` seconds: how it went and the flame graph (SVG)."""
    if not duration > 0:
        raise TaskAccessError(f"--duration must be a positive number of seconds, got {duration!r}")
    if getattr(client._async, "remote", False):  # team mode: the Iris API runs it for the job's owner or an admin
        done = client._run(client._async.task_access(job_id, task_index, profile=True, duration=duration))  # type: ignore[attr-defined]
        output(done["output"])
        return Outcome(done["exit_code"], done["error"]), done["svg"]
    task = find_running_task(client, job_id, task_index)
    inp = TaskAccessInput(activity=PROFILE_TASK, access_id=uuid.uuid4().hex, job_id=job_id,
                          task_index=task_index, worker_id=task.worker_id, duration_seconds=duration)  # fmt: skip
    outcome = _run(client, inp, output)
    if outcome.exit_code != 0:
        return outcome, b""
    return outcome, client._async.blobs.get(profile_blob_key(inp.access_id))
