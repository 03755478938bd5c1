"""`iris task exec` and `iris task profile` on the client's side: find the task, run, stream, fetch.

The client starts a TaskAccessWorkflow (workflows/tasks/task_access_workflow.py), which runs the agent's
exec or profile activity on the worker the task runs on (the agent listens on nothing but its task
queue): iris/client/task_access_runs.py, loaded only then. In team mode the Iris API does that for the
job's owner or an admin, and this module asks it over HTTP: no Temporal SDK is loaded.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from activities.contracts import EXEC_IN_TASK, PROFILE_TASK, TaskAccessInput, profile_blob_key
from iris.client.iris_client import IrisClient
from iris.types import JobState, TaskState, TaskStatus

__all__ = ["TaskAccessError", "exec_in_task", "find_running_task", "profile_task"]


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


def _run(client: IrisClient, inp: TaskAccessInput, output: Callable[[bytes], object]) -> Outcome:
    """Through Temporal (task_access_runs), imported only here: a team-mode client never loads the SDK."""
    from iris.client.task_access_runs import run_access

    return Outcome(*run_access(client, inp, output))


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
