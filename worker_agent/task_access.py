"""Reaching into a running task from outside: `iris task exec` and `iris task profile`, on the agent's side.

The two activities run on the worker's own task queue (a TaskAccessWorkflow the client started
puts them there), so nothing listens on a port: the agent already polls that queue. They find the
task among the ones this agent runs and act on it where it runs:

- exec: the command runs with the task's environment and working directory: as a host process
  with the environment the task got (and as the task's user), or inside the task's container
  through the engine's exec (Docker's exec API, the CRI's ExecSync for containerd). Its output is
  streamed to the log store (`task_access_log_url`), which the client follows; its exit code is
  the result.
- profile: py-spy samples the task's Python process (found among the task's processes, on the
  host: py-spy reads a container's processes from outside) for the given time and writes a flame
  graph (SVG), stored as a blob the client fetches. py-spy needs ptrace rights over the task: the
  agent runs as root, or as the task's user.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, BinaryIO

import psutil
import structlog
from temporalio import activity
from temporalio.api.workflowservice.v1 import RecordActivityTaskHeartbeatRequest
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import (
    EXEC_IN_TASK,
    PROFILE_TASK,
    TaskAccessInput,
    TaskAccessResult,
    profile_blob_key,
    task_access_log_url,
)
from worker_agent.object_store import Blobs, Logs, open_log_store
from worker_agent.process_table import group_members
from worker_agent.runtimes.base import (
    DEFAULT_INHERITED_ENV,
    ContainerRuntime,
    RuntimeName,
    TaskHandle,
    TaskSpec,
    task_environment,
)

__all__ = ["RunningTasks", "TaskAccess", "py_spy_path", "python_process"]

log = structlog.get_logger("iris.agent")

RunningTasks = dict[tuple[str, int], tuple[TaskHandle, int, TaskSpec]]
"""The agent's running tasks by (job id, task index): their runtime handle, attempt and spec."""
BEAT_SECONDS = 0.25
"""How often a running exec or profile beats and looks for its client's cancel (one heartbeat call each): an
interrupted `iris task exec` leaves its command running at most this long. Sessions are few (a person runs them)."""
CANCEL_ASK_TIMEOUT_SECONDS = 1.0  # one look's wait for the server; unanswered, the next beat asks again
EXEC_SYNC_TIMEOUT_SECONDS = 3600  # containerd's ExecSync returns output only at the end: bounded


def py_spy_path() -> str | None:
    """The py-spy executable: beside this interpreter (the installed dependency), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _is_python(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        names = [process.name(), *(process.cmdline()[:1])]
        return any(Path(n).name.startswith("python") for n in names if n)
    return False


def python_process(pids: list[int]) -> int | None:
    """The task's Python process among `pids`: the first one started that is a Python interpreter.

    The first started is the task's main program when it is Python (`python train.py`, a shipped
    callable), or the first Python a wrapper script (`sh -c ...`) started.
    """
    found: list[tuple[float, int]] = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            if _is_python(process):
                found.append((process.create_time(), pid))
    return min(found)[1] if found else None


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (a container's processes, seen from the host)."""
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        return [pid, *(child.pid for child in root.children(recursive=True))]
    return []


class TaskAccess:
    """The exec and profile activities of one agent, over the tasks it runs."""

    def __init__(self, runtime: ContainerRuntime, running: RunningTasks, blobs: Blobs, store_url: str) -> None:
        self.runtime = runtime
        self.running = running
        self.blobs = blobs
        self._logs: Logs | None = None
        self._store_url = store_url

    def activities(self) -> list[Callable[..., Awaitable[TaskAccessResult]]]:
        return [self.exec_in_task, self.profile_task]

    def _output(self, inp: TaskAccessInput) -> BinaryIO:
        if self._logs is None:
            self._logs = open_log_store(task_access_log_url(self._store_url))
        return self._logs.open_writer(inp.access_id, 0, 0)

    def _find(self, inp: TaskAccessInput) -> tuple[TaskHandle, TaskSpec] | str:
        found = self.running.get((inp.job_id, inp.task_index))
        if found is None:
            return f"task {inp.task_index} of job {inp.job_id} is not running on worker {inp.worker_id}"
        handle, _, spec = found
        return handle, spec

    @activity.defn(name=EXEC_IN_TASK)
    async def exec_in_task(self, inp: TaskAccessInput) -> TaskAccessResult:
        """Run `inp.argv` in the task's environment; output streamed to the log store; its exit code."""
        found = self._find(inp)
        if isinstance(found, str):
            return TaskAccessResult(exit_code=-1, error=found)
        handle, spec = found
        log.info("task_exec", job_id=inp.job_id, task_index=inp.task_index, program=Path(inp.argv[0]).name)

        def alive() -> bool:  # the command lives no longer than its task (as `docker exec`'s dies with its container)
            now = self.running.get((inp.job_id, inp.task_index))
            return now is not None and now[0] == handle

        with self._output(inp) as sink:
            try:
                if self.runtime.name == RuntimeName.DOCKER:
                    code = await _beating(_docker_exec(self.runtime, handle, spec, inp.argv, sink), alive)
                elif self.runtime.name == RuntimeName.CONTAINERD:
                    code = await _beating(_containerd_exec(self.runtime, handle, inp.argv, sink), alive)
                else:
                    code = await _process_exec(self.runtime, handle, spec, inp.argv, sink, alive)
            except TaskEndedError:
                return TaskAccessResult(exit_code=-1, error=f"task {inp.task_index} of job {inp.job_id} ended: "
                                                            "the command was killed with it")  # fmt: skip
            except CancelAskedError:
                return TaskAccessResult(exit_code=-1, error=CANCELLED)
            except FileNotFoundError as err:
                return TaskAccessResult(exit_code=-1, error=f"cannot run {inp.argv[0]!r}: {err.strerror}")
            except Exception as err:  # an engine's refusal: the user's answer, in one line
                return TaskAccessResult(exit_code=-1, error=f"cannot run the command in the task: {err}")
        if code < 0 and await _gone_soon(alive, self._main_ended(handle)):  # killed with the task's other processes
            return TaskAccessResult(exit_code=-1, error=f"task {inp.task_index} of job {inp.job_id} ended: "
                                                        "the command was killed with it")  # fmt: skip
        return TaskAccessResult(exit_code=code)

    @activity.defn(name=PROFILE_TASK)
    async def profile_task(self, inp: TaskAccessInput) -> TaskAccessResult:
        """Sample the task's Python process with py-spy for `inp.duration_seconds`; store the flame graph."""
        found = self._find(inp)
        if isinstance(found, str):
            return TaskAccessResult(exit_code=-1, error=found)
        handle, _ = found
        spy = py_spy_path()
        if spy is None:
            return TaskAccessResult(exit_code=-1, error=f"py-spy is not installed on worker {inp.worker_id}")
        pid = python_process(await self._task_pids(handle))
        if pid is None:
            return TaskAccessResult(
                exit_code=-1, error=f"task {inp.task_index} of job {inp.job_id} runs no Python process"
            )
        log.info("task_profile", job_id=inp.job_id, task_index=inp.task_index, pid=pid, seconds=inp.duration_seconds)
        with tempfile.TemporaryDirectory(prefix="iris-profile-") as tmp, self._output(inp) as sink:
            svg = Path(tmp) / "profile.svg"
            argv = [spy, "record", "--pid", str(pid), "--duration", str(max(1, round(inp.duration_seconds))),
                    "--format", "flamegraph", "--output", str(svg), "--subprocesses", "--nonblocking"]  # fmt: skip
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=sink, stderr=asyncio.subprocess.STDOUT
            )
            try:
                code = await _beating(_waited(process))
            except CancelAskedError:
                return TaskAccessResult(exit_code=-1, error=CANCELLED)
            if code != 0 or not svg.exists():
                return TaskAccessResult(
                    exit_code=code or -1, error=f"py-spy failed (exit code {code}); its output is above"
                )
            await asyncio.to_thread(self.blobs.put, profile_blob_key(inp.access_id), svg.read_bytes())
        return TaskAccessResult(exit_code=0)

    def _main_ended(self, handle: TaskHandle) -> Callable[[], bool]:
        """Whether the task's main process has ended (always True where the runtime does not say): a process
        task's exec'd command is killed with the task's cgroup only once the agent has reaped its main process
        (worker_agent/runtimes/process.py: `wait`, `kill`), in this event loop."""
        main_ended = getattr(self.runtime, "main_ended", None)
        return (lambda: True) if main_ended is None else (lambda: bool(main_ended(handle)))

    async def _task_pids(self, handle: TaskHandle) -> list[int]:
        """The task's processes, as host pids."""
        if self.runtime.name == RuntimeName.DOCKER:
            client: Any = self.runtime._client  # type: ignore[attr-defined]
            state = (await asyncio.to_thread(client.inspect_container, handle)).get("State", {})
            return _tree(int(state.get("Pid") or 0))
        if self.runtime.name == RuntimeName.CONTAINERD:
            return _tree(await _containerd_pid(self.runtime, handle))
        return await asyncio.to_thread(group_members, int(handle))


async def _gone_soon(alive: Callable[[], bool], main_ended: Callable[[], bool], seconds: float = 3.0) -> bool:
    """Whether the task ends within `seconds`: a command killed by a signal as its task ended (the agent then
    forgets the task a moment later) died with it, not by its own doing. While the task's main process runs
    (`main_ended` says not), it was not killed with the task: no wait then (a `kill -9 $$` answers at once)."""
    if not main_ended():
        return False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while alive():
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def _waited(process: asyncio.subprocess.Process, group: bool = False) -> int:
    """The process's exit code; cancelled, it is killed first (with its whole process group if `group`)."""
    try:
        return await process.wait()
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()
        raise


class TaskEndedError(Exception):
    """The task a command was run in ended while the command ran (the command was killed with it)."""


class CancelAskedError(Exception):
    """The access workflow asked to cancel the activity (the client was interrupted): the command was killed."""


CANCELLED = "cancelled by the client"


async def _cancel_asked() -> bool:
    """One heartbeat sent to the server now: whether the activity's cancel was asked (or it is gone there).

    The SDK forwards `activity.heartbeat()` at most every 8 s on the worker's task queue (its throttle,
    worker_agent/agent.py), and learns a cancel only from such a forwarded beat: an interrupted
    `iris task exec` would leave its command running that long. As the lease does for `run_task`
    (worker_agent/leases/lease.py), the beat is sent here and its answer read at once.
    """
    try:
        client = activity.client()
    except RuntimeError:  # no client (an ActivityEnvironment without one): the SDK's beats only
        return False
    request = RecordActivityTaskHeartbeatRequest(
        task_token=activity.info().task_token, identity=client.identity, namespace=client.namespace
    )
    try:
        response = await client.workflow_service.record_activity_task_heartbeat(
            request, retry=False, timeout=timedelta(seconds=CANCEL_ASK_TIMEOUT_SECONDS)
        )
    except RPCError as err:
        return err.status == RPCStatusCode.NOT_FOUND  # its workflow ended (cancelled and closed)
    except Exception:  # no answer: the SDK's own beats carry on
        return False
    return bool(response.cancel_requested)


async def _beating(work: Awaitable[int], alive: Callable[[], bool] = lambda: True) -> int:
    """`work`'s result, heartbeating every BEAT_SECONDS meanwhile; the work cancelled (killed) and TaskEndedError once
    `alive()` says the task it runs in is gone, CancelAskedError once a beat finds the cancel asked."""
    job = asyncio.ensure_future(work)
    try:
        while True:
            activity.heartbeat()
            done, _ = await asyncio.wait({job}, timeout=BEAT_SECONDS)
            if done:
                return job.result()
            if not alive():
                raise TaskEndedError
            if await _cancel_asked():
                raise CancelAskedError
    finally:
        if not job.done():
            job.cancel()
            with contextlib.suppress(BaseException):
                await job


async def _process_exec(runtime: ContainerRuntime, handle: TaskHandle, spec: TaskSpec, argv: list[str],
                        sink: BinaryIO, alive: Callable[[], bool]) -> int:  # fmt: skip
    """A host process with the task's environment, working directory, user and cgroup (its limits); its exit code."""
    inherit = getattr(runtime, "_inherit_env", DEFAULT_INHERITED_ENV)
    env = task_environment(spec.env, inherit)
    if "/" not in argv[0] and shutil.which(argv[0], path=env.get("PATH")) is None:
        raise FileNotFoundError(errno.ENOENT, "not found on the task's PATH")
    limited = getattr(runtime, "_groups", {}).get(handle)
    if limited is not None:
        argv = limited[0].joined(argv)  # joins the task's cgroup before it execs the command
    user = getattr(runtime, "run_as", None)
    as_user: dict[str, Any] = {}
    if user is not None and os.geteuid() == 0:
        as_user = {"user": user.uid, "group": user.gid, "extra_groups": []}
        env["HOME"] = spec.cwd or env.get("HOME", "/")
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=sink, stderr=asyncio.subprocess.STDOUT,
        env=env, cwd=spec.cwd, start_new_session=True, **as_user,
    )  # fmt: skip
    return await _beating(_waited(process, group=True), alive)


async def _docker_exec(runtime: ContainerRuntime, handle: TaskHandle, spec: TaskSpec, argv: list[str],
                       sink: BinaryIO) -> int:  # fmt: skip
    """Docker's exec in the task's container (its environment), output copied to `sink` as it comes."""
    client: Any = runtime._client  # type: ignore[attr-defined]  # the runtime's APIClient

    def run() -> int:
        exec_id = client.exec_create(handle, argv, workdir=spec.cwd, stdout=True, stderr=True)["Id"]
        for chunk in client.exec_start(exec_id, stream=True):
            sink.write(chunk)
            sink.flush()
        return int(client.exec_inspect(exec_id).get("ExitCode") or 0)

    return await asyncio.to_thread(run)


async def _containerd_exec(runtime: ContainerRuntime, handle: TaskHandle, argv: list[str], sink: BinaryIO) -> int:
    """The CRI's ExecSync in the task's container: its output arrives when it ends."""
    from worker_agent.runtimes.cri import cri_runtime_v1_pb2 as cri

    stub, _ = runtime._stubs()  # type: ignore[attr-defined]
    response = await stub.ExecSync(
        cri.ExecSyncRequest(container_id=handle, cmd=argv, timeout=EXEC_SYNC_TIMEOUT_SECONDS),
        timeout=EXEC_SYNC_TIMEOUT_SECONDS + 10,
    )
    sink.write(response.stdout)
    sink.write(response.stderr)
    sink.flush()
    return int(response.exit_code)


async def _containerd_pid(runtime: ContainerRuntime, handle: TaskHandle) -> int:
    """The host pid of a CRI container's first process (its verbose status)."""
    import json

    from worker_agent.runtimes.cri import cri_runtime_v1_pb2 as cri

    stub, _ = runtime._stubs()  # type: ignore[attr-defined]
    response = await stub.ContainerStatus(cri.ContainerStatusRequest(container_id=handle, verbose=True), timeout=10)
    return int(json.loads(response.info.get("info", "{}")).get("pid") or 0)
