"""IrisClient: submit jobs and read their state, through Temporal or, in team mode, the Iris API.

`AsyncIrisClient` (iris/client/async_client.py) is the implementation; `IrisClient` is the blocking face
the public API promises, running the async client on a private event loop thread. In team mode the async
client is `RemoteIrisClient` (iris/auth/remote.py), HTTP to the Iris API: the modules that read Temporal are
imported by the methods that use them, so a team-mode client loads no Temporal SDK (~0.55 s of CPU of each
`iris` command: tests/auth/test_team_mode.py); schedules too (iris/client/schedule_calls.py)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import weakref
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from iris import exit_grace
from iris.types import JobFailedError, JobState, TaskState

if TYPE_CHECKING:
    from iris.client.async_client import AsyncIrisClient
    from iris.client.reservation_requests import ReservationStatus
    from iris.client.schedule_spec import ScheduleRef, ScheduleStatus
    from iris.client.views.team_tables import QueueRow
    from iris.connection import TemporalSettings
    from iris.types import JobStatus, SliceStatus, TaskStatus, TeamStatus, UserStatus, WorkerStatus
    from worker_agent.object_store import Logs

T = TypeVar("T")


class _LoopThread:
    """A private event loop so the blocking client works inside scripts, notebooks and threads."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="iris-client", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError("this IrisClient was closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Cancel what is still running on the loop, stop it and join its thread (idempotent)."""
        if self.loop.is_closed():
            return

        async def cancel_pending() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(cancel_pending(), self.loop).result(timeout)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)
        if not self.thread.is_alive():
            self.loop.close()


_OPEN: weakref.WeakSet[IrisClient] = weakref.WeakSet()
"""Clients not closed yet: closed at interpreter exit (`_close_open_clients`)."""


def _close_open_clients() -> None:
    """At exit, close what the program left open, before the interpreter finalizes: no task of the client's
    loop is left for the Temporal SDK's runtime threads to complete into a finalizing interpreter. Then
    iris.exit_grace lets those threads finish the calls they completed (temporalio/sdk-python#300)."""
    for client in list(_OPEN):
        with contextlib.suppress(Exception):
            client.close()


exit_grace.on_exit(_close_open_clients)


def _close_remote(loop: _LoopThread, remote: Any) -> None:
    """Close a team-mode client's HTTP session on its loop (waiting briefly unless called on that loop)."""
    if loop.loop.is_closed() or not loop.thread.is_alive():
        return
    future = asyncio.run_coroutine_threadsafe(remote.close(), loop.loop)
    if threading.current_thread() is not loop.thread:
        with contextlib.suppress(Exception):
            future.result(5.0)


class Job:
    """A submitted job."""

    def __init__(self, client: IrisClient, job_id: str) -> None:
        self._client = client
        self.job_id = job_id

    def __repr__(self) -> str:
        return f"Job({self.job_id!r})"

    def status(self) -> JobStatus:
        return self._client.job_status(self.job_id)

    def wait(self, timeout: float | None = 600, stream_logs: bool = False, raise_on_failure: bool = True) -> JobStatus:
        """Block until the job ends; JobFailedError on FAILED/KILLED/UNSCHEDULABLE unless told not to."""
        return self._client.wait(self.job_id, timeout=timeout, stream_logs=stream_logs,
                                 raise_on_failure=raise_on_failure)

    def results(self, partial: bool = False, trust: bool = False) -> list[Any]:
        """Each task's return value by task index.

        JobFailedError (naming the failed tasks' errors) if the job did not succeed, unless
        `partial=True`, which gives None for every task that has no result. In team mode, another
        user's job's values (an admin reading them) are read as plain data only (a
        PermissionDeniedError names anything else): unpickling runs code of the job's owner's choosing,
        here; `trust=True` reads them anyway.
        """
        return self._client._run(self._client._async.results(self.job_id, partial=partial, trust=trust))

    def logs(self, task_index: int = 0) -> list[str]:
        return self._client.fetch_task_logs(self.job_id, task_index)

    def terminate(self) -> bool:
        return self._client.terminate(self.job_id)


class IrisClient:
    """The blocking client of the public API (see the README)."""

    _session_finalizer: Any = None  # team mode: closes the Iris API session (iris/auth/remote.py)

    def __init__(self, async_client: AsyncIrisClient, loop: _LoopThread) -> None:
        self._async = async_client
        self._loop = loop
        _OPEN.add(self)

    @classmethod
    def connect(cls, address: str | None = None, namespace: str | None = None, *, store: str | None = None,
                settings: TemporalSettings | None = None, user: str | None = None,
                token: str | None = None) -> IrisClient:
        """Connect to `address` (IRIS_TEMPORAL_* for TLS/API key/namespace), else the embedded cluster.

        `user` names whom jobs are submitted as when the connection has no authenticated identity.
        In team mode (an `http(s)://` Iris API address, or a local cluster with `auth: tokens`), `token`
        (else IRIS_TOKEN, else IRIS_TOKEN_FILE) is the credential and jobs are the verified user's."""
        from iris.auth.connect import team_api

        api = team_api(address, token, explicit_settings=settings is not None and settings.address is not None)
        loop = _LoopThread()
        try:
            if api is not None:
                from iris.auth.remote import RemoteIrisClient

                remote = loop.run(RemoteIrisClient.connect(api[0], api[1], user=user))
                client = cls(remote, loop)  # type: ignore[arg-type]  # the same methods, through the Iris API
                # Its HTTP session is closed on close(), when the client is collected, or at exit.
                client._session_finalizer = weakref.finalize(client, _close_remote, loop, remote)
                return client
            from iris.client.async_client import AsyncIrisClient

            return cls(loop.run(AsyncIrisClient.connect(address, namespace, store=store, settings=settings,
                                                        user=user)), loop)  # fmt: skip
        except BaseException:
            loop.close()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro)

    def close(self) -> None:
        """Stop the client's private event loop and its thread; the client cannot be used afterwards."""
        finalizer = getattr(self, "_session_finalizer", None)
        if finalizer is not None:
            finalizer()  # team mode: close the HTTP session first (once)
        self._loop.close()

    def __enter__(self) -> IrisClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def store_url(self) -> str:
        return self._async.store_url

    @property
    def log_store(self) -> Logs:
        """Where the tasks' logs are (for byte-exact reading, as `iris job logs` does)."""
        return self._async.logs

    def submit(self, fn: Callable[..., Any], *args: Any, **options: Any) -> Job:
        return Job(self, self._run(self._async.submit(fn, *args, **options)))

    def submit_command(self, command: Sequence[str], **options: Any) -> Job:
        return Job(self, self._run(self._async.submit_command(command, **options)))

    def job(self, job_id: str) -> Job:
        """The handle `submit` returns, for any job (submitted by anyone, from any process); KeyError if unknown."""
        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"job_id must be a job's id (a non-empty string), got {job_id!r}")
        self._run(self._async._require_job(job_id))
        return Job(self, job_id)

    def job_status(self, job_id: str) -> JobStatus:
        return self._run(self._async.status(job_id))

    def wait(self, job_id: str, timeout: float | None = 600, stream_logs: bool = False,
             raise_on_failure: bool = True, on_progress: Callable[[JobStatus], None] | None = None) -> JobStatus:
        from iris.cli.log_output import LogFollower, LogPrinter

        follower = LogFollower(self._async.logs, job_id, LogPrinter(sys.stdout, prefix=True)) if stream_logs else None

        def progress(status: JobStatus) -> None:
            if follower is not None:
                sys.stdout.flush()
                follower.poll(status.num_tasks, final=status.done)
            if on_progress:
                on_progress(status)

        watch = progress if stream_logs or on_progress else None
        status = self._run(self._async.wait(job_id, timeout=timeout, poll=0.5, on_progress=watch))
        if raise_on_failure and status.state != JobState.SUCCEEDED:
            raise JobFailedError(status)
        return status

    def list_jobs(self, limit: int = 200, *, state: str | None = None, user: str | None = None,
                  name: str | None = None, parent: str | None = None, namespace: str | None = None,
                  under: str | None = None) -> list[JobStatus]:
        """Jobs newest first (at most `limit`), optionally only those in `state`, of `user`, named `name`,
        children of the job `parent`, anywhere below the job `under`, in `namespace`."""
        return self._run(self._async.list_jobs(limit, state=state, user=user, name=name, parent=parent,
                                               namespace=namespace, under=under))

    def list_tasks(self, job_id: str) -> list[TaskStatus]:
        """Every task; a running one's peak memory, CPU and duration are its attempt's so far."""
        return self._with_use_so_far(job_id, list(self.job_status(job_id).tasks))

    def task_status(self, job_id: str, task_index: int) -> TaskStatus:
        tasks = self.job_status(job_id).tasks
        _check_task_index(task_index, len(tasks))
        return self._with_use_so_far(job_id, [tasks[task_index]])[0]

    def _with_use_so_far(self, job_id: str, tasks: list[TaskStatus]) -> list[TaskStatus]:
        """The running tasks' usage so far, from their attempts' last heartbeats (as `iris job summary` shows it)."""
        from dataclasses import replace

        from iris.client.views.live_usage import live_usage

        running = [t.task_index for t in tasks if t.state == TaskState.RUNNING]
        if not running or getattr(self._async, "remote", False):  # team mode: the figures the job table holds
            return tasks
        live = self._run(live_usage(self._async.temporal, job_id, running))
        return [t if (u := live.get(t.task_index)) is None else
                replace(t, peak_memory_bytes=u[0], cpu_seconds=u[1], duration_seconds=u[2]) for t in tasks]  # fmt: skip

    def fetch_task_logs(self, job_id: str, task_index: int = 0) -> list[str]:
        """The task's stdout and stderr lines, all attempts; KeyError for an unknown job, ValueError for a
        task it does not have (a task that printed nothing, or has not run yet, has [])."""
        lines = self._async.fetch_task_logs(job_id, task_index)
        if not lines:  # nothing in the store: say so when there is no such job or task
            _check_task_index(task_index, self.job_status(job_id).num_tasks)
        return lines

    def terminate(self, job_id: str) -> bool:
        """Kill the job's tasks and its unfinished descendants; False if none of them still ran."""
        return self._run(self._async.terminate(job_id))

    def resolve(self, job_id: str, name: str) -> list[str]:
        """The "host:port" of named port `name` of each running task of the job, in task index order.

        A task publishes its endpoints when it starts and they vanish when it ends: a finished
        job resolves to []. KeyError for an unknown job.
        """
        if getattr(self._async, "remote", False):  # team mode: through the Iris API
            found = self._run(self._async.endpoints(job_id)).get(name, {})  # type: ignore[attr-defined]
            return [found[i] for i in sorted(found)]
        from iris.client import endpoints

        return self._run(endpoints.resolve(self._async.temporal, job_id, name))

    def endpoints(self, job_id: str) -> dict[str, dict[int, str]]:
        """Every named port of the job's running tasks: name -> task index -> "host:port"."""
        if getattr(self._async, "remote", False):  # team mode: through the Iris API
            return self._run(self._async.endpoints(job_id))  # type: ignore[attr-defined,no-any-return]
        from iris.client import endpoints

        return self._run(endpoints.job_endpoints(self._async.temporal, job_id))

    def list_workers(self) -> list[WorkerStatus]:
        return self._run(self._async.list_workers())

    def list_reservations(self) -> list[ReservationStatus]:
        """Each reservation: its id, its job, its workers with what is held and used there, lost workers."""
        return self._run(self._async.list_reservations())

    def list_slices(self, include_ended: bool = False) -> list[SliceStatus]:
        """The autoscaler's slices, newest first (with `include_ended`, finished ones too)."""
        return self._run(self._async.list_slices(include_ended))

    def list_users(self) -> list[UserStatus]:
        """Users' credits, usage, running tasks and pending jobs, as the scheduler publishes them."""
        return self._run(self._async.list_users())

    def user_status(self, user: str) -> UserStatus | None:
        """One user's credits and usage; a user never seen has the cluster's default credits and has used none
        (None until a scheduler has published its default)."""
        return self._run(self._async.user_status(user))

    def list_teams(self) -> list[TeamStatus]:
        """Teams' quotas, use, borrowed and lent capacity and pending jobs, as the scheduler publishes them."""
        return self._run(self._async.list_teams())

    def queue(self) -> list[QueueRow]:
        """The waiting jobs in scheduling order: position, job, user, team, band, estimated start."""
        return self._run(self._async.queue())

    def set_credits(self, user: str, amount: float) -> None:
        """An operator's call: set `user`'s remaining balance (usage so far is kept)."""
        self._run(self._async.set_credits(user, amount))

    def terminate_slice(self, slice_id: str, drain_timeout: float = 0.0) -> bool:
        """Scale a slice down now; False if it had already ended, KeyError if there is no such slice."""
        if getattr(self._async, "remote", False):  # team mode: through the Iris API
            return self._run(self._async.terminate_slice(slice_id, drain_timeout))  # type: ignore[attr-defined]
        from iris.client.views import fleet_view

        return self._run(fleet_view.terminate_slice(self._async.temporal, slice_id, drain_timeout))

    def cordon_worker(self, worker_id: str, cordoned: bool = True) -> None:
        """No new work on this worker (its running tasks go on); `cordoned=False` undoes it. KeyError if unknown."""
        if getattr(self._async, "remote", False):  # team mode: through the Iris API
            self._run(self._async.cordon_worker(worker_id, cordoned))  # type: ignore[attr-defined]
            return
        from iris.client.views import fleet_view

        self._run(fleet_view.cordon_worker(self._async.temporal, worker_id, cordoned))

    # -- schedules (iris/client/schedule_calls.py: Temporal's Schedules through the SDK, or the Iris API's) --

    def create_schedule(self, name: str, fn: Callable[..., Any], *args: Any, cron: str, timezone: str = "UTC",
                        overlap: str = "skip", **options: Any) -> ScheduleRef:
        """A Temporal Schedule named `name`: each firing submits `fn(*args)` as a job `<name>-<fire time>`,
        with the job `options` of `submit`. `overlap`: skip, buffer_one, allow_all or cancel_other."""
        from iris.client import schedule_calls

        self._run(schedule_calls.create(self._async, name, fn, args, cron=cron, timezone=timezone, overlap=overlap,
                                   **options))  # fmt: skip
        return self.schedule(name)

    def create_command_schedule(self, name: str, command: Sequence[str], *, cron: str, timezone: str = "UTC",
                                overlap: str = "skip", **options: Any) -> ScheduleRef:
        """`create_schedule` for a command (the options of `submit_command`)."""
        from iris.client import schedule_calls

        self._run(schedule_calls.create(self._async, name, None, (), command=command, cron=cron, timezone=timezone,
                                   overlap=overlap, **options))  # fmt: skip
        return self.schedule(name)

    def list_schedules(self) -> list[ScheduleStatus]:
        """Every schedule, by name."""
        from iris.client import schedule_calls

        return self._run(schedule_calls.list_all(self._async))

    def schedule(self, name: str) -> ScheduleRef:
        """The schedule `name` (its calls raise KeyError if there is none)."""
        from iris.client import schedule_calls
        from iris.client.schedule_spec import ScheduleRef

        return ScheduleRef(schedule_calls.handle(self._async, name), self._run, lambda job_id: Job(self, job_id))

    def drain_worker(self, worker_id: str, timeout: float | None = None,
                     on_progress: Callable[[WorkerStatus], None] | None = None) -> WorkerStatus:
        """Cordon the worker and wait until its running tasks have finished."""
        return self._run(self._async.drain_worker(worker_id, timeout, on_progress=on_progress))


__all__ = ["IrisClient", "Job", "JobFailedError"]


def _check_task_index(task_index: object, num_tasks: int) -> None:
    """ValueError naming task_index unless the job has that task."""
    if isinstance(task_index, bool) or not isinstance(task_index, int) or not 0 <= task_index < num_tasks:
        raise ValueError(f"task_index must be between 0 and {num_tasks - 1}, got {task_index!r}")
