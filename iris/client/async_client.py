"""AsyncIrisClient: submit jobs and read their state, all through Temporal.

The implementation behind the blocking `IrisClient` (iris/client/iris_client.py), for callers with an event loop.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import structlog
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import (
    CONTROL_TASK_QUEUE,
    JOB_STATUS_QUERY,
    JOB_TASKS_QUERY,
    KILL_JOB,
    PENDING_REASON,
    SCHEDULER_WORKFLOW_ID,
    SUMMARY_QUERY,
    launch_blob_key,
)
from activities.job_tree import kill_tree
from activities.proto import cluster_pb2 as pb
from iris.client import idempotent
from iris.client.child_jobs import child_job_id, inherit
from iris.client.cluster_reads import QUERY_TIMEOUT, ClusterReads, ask_scheduler
from iris.client.code_shipping import unpickle_result
from iris.client.job_control import IfExists, check_dependencies, start_memo
from iris.client.job_lookup import describe_job, is_missing
from iris.client.status_reads import (
    _connect_reason,
    _failed_job_status,
    _job_status,
    _start_attributes,
    _visibility_query,
    _visible_status,
)
from iris.client.submission import make_job_id, prepare_submission, resolve_user, split_launch
from iris.client.task_connection import require_cluster_address, task_parent
from iris.client.views import team_tables
from iris.connection import ADDRESS_ENV as ADDRESS_ENV
from iris.connection import STORE_ENV as STORE_ENV
from iris.connection import TemporalSettings
from iris.security.codec import load_key
from iris.security.key_check import check_cluster_key
from iris.types import JobFailedError, JobState, JobStatus, TaskState
from worker_agent.object_store import SealedBlobs, open_blob_store, open_log_store
from worker_agent.storage import LogCursor
from workflows.jobs.details import job_request_markdown
from workflows.jobs.job_summary import is_summary, read_page, with_rows
from workflows.jobs.job_workflow import JobWorkflow
from workflows.states import TERMINAL_JOB_STATES
from workflows.visibility import JOB_NAME, JOB_STATE, JOB_USER, expand_row

log = structlog.get_logger("iris.client.iris_client")

MAX_DESCRIBE_INTERVAL = 5.0
"""Longest pause between describes of a job `wait` watches when the server refuses another long poll."""
CONTROLLER_DOWN_REASON = "no answer from the Iris controller (down or starting), so the scheduler's reason is unknown"
CONTROLLER_SILENT = "as last heard: no answer from the Iris controller now"

QUERY_TIMEOUT_ENV = "IRIS_QUERY_TIMEOUT_SECONDS"
"""Overrides QUERY_TIMEOUT for a client's job status queries (a test of a stalled controller waits less)."""
MAX_QUERY_TIMEOUT_SECONDS = 60.0


def query_timeout_from(environ: Mapping[str, str]) -> timedelta:
    """How long a job status query waits for the controller: QUERY_TIMEOUT_ENV when set, else QUERY_TIMEOUT."""
    text = environ.get(QUERY_TIMEOUT_ENV, "").strip()
    if not text:
        return QUERY_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= MAX_QUERY_TIMEOUT_SECONDS:
        raise ValueError(f"{QUERY_TIMEOUT_ENV}: must be seconds > 0 and at most {MAX_QUERY_TIMEOUT_SECONDS:g}, "
                         f"got {text!r}")  # fmt: skip
    return timedelta(seconds=seconds)


class AsyncIrisClient(ClusterReads):
    def __init__(
        self, client: Client, store_url: str, user: str | None = None, parent_job_id: str = "",
        query_timeout: timedelta = QUERY_TIMEOUT,
    ) -> None:  # fmt: skip
        self.temporal = client
        self.query_timeout = query_timeout  # a job status query's wait for the controller
        self.store_url = store_url
        self.user = user
        self.parent_job_id = parent_job_id  # inside a task of this job: what it submits are its children
        self._parents: dict[str, tuple[pb.JobRequest, dict[str, str]]] = {}  # by parent job id
        self.blobs = open_blob_store(store_url)
        self.logs = open_log_store(store_url.rstrip("/") + "/logs")
        self._results: dict[str, pb.JobStatus] = {}  # finished jobs never change: cache them

    @classmethod
    async def connect(
        cls, address: str | None = None, namespace: str | None = None, *, store: str | None = None,
        settings: TemporalSettings | None = None, user: str | None = None,
    ) -> AsyncIrisClient:
        """Connect to `address`, or to the embedded local cluster (started if it is not running).

        TLS, API key and namespace come from `settings`, else from the IRIS_TEMPORAL_* environment.
        Jobs are submitted as the connection's authenticated identity when it has one, else as
        `user`, else IRIS_USER, else the login name.
        """
        if user is not None:
            resolve_user(user)  # a bad name is a ValueError naming `user`, before connecting
        timeout = query_timeout_from(os.environ)  # a bad value is a ValueError naming its variable, before connecting
        settings = settings or TemporalSettings.load(address=address, namespace=namespace)
        store = store or os.environ.get(STORE_ENV)
        if settings.address is None:
            from iris.local.cluster import ensure_running

            require_cluster_address()  # inside a task: its own cluster or none, never a new embedded one
            load_key()  # a malformed IRIS_CODEC_KEY fails here, before a cluster is started that cannot use it

            info = await asyncio.to_thread(ensure_running)
            settings = settings.model_copy(update={"address": info.address})
            store = store or info.store_url
        try:
            client = await settings.connect()
        except RuntimeError as err:  # the SDK's connect errors are RuntimeErrors carrying a Rust debug string
            raise ConnectionError(f"cannot reach Temporal at {settings.address}: {_connect_reason(err)}") from None
        await check_cluster_key(client)  # another key: one line now, not a job no controller can read
        if store is None:
            store = (await ask_scheduler(client, SUMMARY_QUERY, pb.ClusterSummary)).store_url
        user = settings.authenticated_user() or resolve_user(user)
        return cls(client, store, user=user, parent_job_id=task_parent(settings.address), query_timeout=timeout)

    # -- submission ----------------------------------------------------------------------------

    async def submit(self, fn: Callable[..., Any], *args: Any, kwargs: dict[str, Any] | None = None,
                     **options: Any) -> str:
        """Ship `fn(*args, **kwargs)` as a job; returns the job id."""
        job = prepare_submission(options, fn=fn, args=args, kwargs=kwargs)
        return await self._start(job.request, payload=job.payload, bundle=job.bundle, given=job.given,
                                 if_exists=job.if_exists)  # fmt: skip

    async def submit_command(self, command: Sequence[str], **options: Any) -> str:
        job = prepare_submission(options, command=command)
        return await self._start(job.request, bundle=job.bundle, given=job.given, if_exists=job.if_exists)

    async def _parent_request(self, parent_id: str) -> tuple[pb.JobRequest, dict[str, str]]:
        """The request of the job a child is submitted under, and its env (read once, from its history).

        From the start event of the job's current run (the same request every run carries), so it
        needs no controller; a command's env stored apart comes from its launch blob.
        """
        if parent_id not in self._parents:
            handle = self.temporal.get_workflow_handle(parent_id)
            parent: pb.JobRequest | None = None
            async for event in handle.fetch_history_events(page_size=1):
                payloads = event.workflow_execution_started_event_attributes.input.payloads
                parent = (await self.temporal.data_converter.decode(payloads[:1], [pb.JobRequest]))[0]
                break
            if parent is None:
                raise KeyError(f"no such job: {parent_id} (the job this task belongs to)")
            parent.job_id = parent.job_id or parent_id
            env = dict(parent.env)
            if parent.launch_blob:
                launch = pb.Launch.FromString(await asyncio.to_thread(self.blobs.get, parent.launch_blob))
                env = dict(launch.env)
            while len(self._parents) >= 1000:  # the API's client serves many tasks' jobs: keep the latest
                self._parents.pop(next(iter(self._parents)))
            self._parents[parent_id] = (parent, env)
        return self._parents[parent_id]

    async def _start(
        self, req: pb.JobRequest, payload: bytes | None = None, bundle: tuple[str, bytes] | None = None,
        given: frozenset[str] = frozenset(), if_exists: IfExists = IfExists.NEW, parent: str | None = None,
    ) -> str:
        """Start the job; `parent` (default: this client's task's job) makes it a child of that job."""
        parent = self.parent_job_id if parent is None else parent
        if req.after:  # every job it waits for exists, before anything is uploaded or started
            await check_dependencies(self.temporal, list(req.after))
        if self.user:  # the authenticated identity (mTLS subject, API key subject) over $USER
            req.user = self.user
        if parent:  # submitted from a task: a child of its job (iris/client/child_jobs.py)
            inherit(req, *await self._parent_request(parent), given)
        req.namespace = req.namespace or req.user
        job_id = child_job_id(req.parent_job_id, make_job_id(req.name))
        named = None
        if if_exists is not IfExists.NEW:  # a job of the name, or the id to start one under (iris/client/idempotent.py)
            named = await idempotent.plan(self.temporal, req, if_exists)
            if named.existing:
                return named.existing
            job_id = named.job_id
        req.job_id = job_id
        # A racing submit of the same name derives the same id: its blobs must not overwrite this one's.
        blob_id = job_id if named is None else f"{job_id}/{uuid.uuid4().hex[:8]}"
        if payload is not None:
            key = f"jobs/{blob_id}/function"
            await asyncio.to_thread(self.blobs.put, key, payload)
            req.entrypoint.function_blob = key
        if bundle is not None:
            key, data = bundle
            if isinstance(self.blobs, SealedBlobs):  # an encrypted bundle's name says nothing of its contents
                key = self.blobs.content_key(key)
            if not await asyncio.to_thread(self.blobs.exists, key):  # content-addressed: uploaded once
                await asyncio.to_thread(self.blobs.put, key, data)
            req.bundle_blob = key
        what = " ".join(req.entrypoint.command.argv)[:80] if req.entrypoint.command.argv else "python callable"
        details = job_request_markdown(req)  # before a big command moves out of the request
        launch = split_launch(req)
        if launch is not None:
            req.launch_blob = launch_blob_key(blob_id)
            await asyncio.to_thread(self.blobs.put, req.launch_blob, launch)
        async def start(job_id: str, policies: dict[str, Any]) -> None:
            await self.temporal.start_workflow(
                JobWorkflow.run,
                req,
                id=job_id,
                task_queue=CONTROL_TASK_QUEUE,
                search_attributes=_start_attributes(req),
                memo=start_memo(req),
                static_summary=f"{req.name}: {req.replicas} x {what}",
                static_details=details,
                **policies,
            )

        if named is not None:
            return await idempotent.start_named(self.temporal, req, named, if_exists, start)
        await start(job_id, {})
        return job_id

    # -- reading state ---------------------------------------------------------------------------

    async def _raw_status(self, job_id: str) -> pb.JobStatus:
        return (await self._answered_status(job_id))[0]

    async def _answered_status(self, job_id: str) -> tuple[pb.JobStatus, bool]:
        """The job's status, and whether the controller answered (else it is Temporal's view alone)."""
        cached = self._results.get(job_id)
        if cached is not None:
            return cached, True
        if not isinstance(job_id, str) or not job_id or "\0" in job_id:
            raise KeyError(f"no such job: {job_id!r}")
        handle = self.temporal.get_workflow_handle(job_id)
        try:
            st = await handle.query(JOB_STATUS_QUERY, result_type=pb.JobStatus, rpc_timeout=self.query_timeout)
        except (RPCError, WorkflowQueryFailedError) as err:
            if isinstance(err, RPCError) and is_missing(err):
                raise KeyError(f"no such job: {job_id}") from None
            await self._require_job(job_id)  # the scheduler, a task or a worker has no job_status query
            if isinstance(err, WorkflowQueryFailedError):
                raise
            st = await self._status_without_controller(job_id)
            if not st.finished_at:
                return st, False
        st = await self._whole_table(job_id, st)
        if st.finished_at and JobState(st.state) in TERMINAL_JOB_STATES and not is_summary(st):
            self._results[job_id] = st
        return st, True

    async def _whole_table(self, job_id: str, st: pb.JobStatus) -> pb.JobStatus:
        """`st` with every task's row: a big job's summary (job_summary) is completed by range queries.

        A job whose workflow cannot answer them (its controller is down) keeps its summary: the job's
        fields and counts, and the rows of the tasks that did not succeed.
        """
        if not is_summary(st):
            return st
        handle = self.temporal.get_workflow_handle(job_id)
        rows: list[pb.TaskStatus] = []
        try:
            while len(rows) < st.num_tasks:
                page = read_page(await handle.query(JOB_TASKS_QUERY, args=[len(rows), st.num_tasks],
                                                    result_type=bytes, rpc_timeout=self.query_timeout))  # fmt: skip
                if not page:
                    break  # a table shorter than its num_tasks (cannot happen; no endless loop if it did)
                rows.extend(page)
        except (RPCError, WorkflowQueryFailedError) as err:
            log.warning("task_rows_not_read", job_id=job_id, error=str(err))
            return st
        return with_rows(st, rows)

    async def _status_without_controller(self, job_id: str) -> pb.JobStatus:
        """The job's status from Temporal alone, for when the controller cannot answer a query.

        A query is answered by the controller's workflow worker; while it is down (or
        stalled), a finished job's status still comes whole from its workflow's result
        in the history, and a live job's state from its `IrisJobState` search attribute.
        """
        handle = self.temporal.get_workflow_handle(job_id, result_type=pb.JobStatus)
        desc = await handle.describe()
        if desc.status is not None and desc.status != WorkflowExecutionStatus.RUNNING:
            try:
                return await handle.result()
            except WorkflowFailureError as err:
                failed = _failed_job_status(err)
                if failed is not None:
                    return failed
        attrs = desc.typed_search_attributes
        log.warning("controller_not_answering", job_id=job_id, state=attrs.get(JOB_STATE))
        # The memo keeps the reason the job last heard (a dependency it waits for, the scheduler's word).
        memo = _visible_status(job_id, await desc.memo(), attrs, desc.start_time.timestamp())
        return pb.JobStatus(
            job_id=job_id,
            name=attrs.get(JOB_NAME) or "",
            user=attrs.get(JOB_USER) or "",
            state=attrs.get(JOB_STATE) or JobState.PENDING,
            submitted_at=desc.start_time.timestamp(),
            pending_reason=memo.pending_reason,
        )

    async def status(self, job_id: str) -> JobStatus:
        """The job now: a finished job from its result (history), a live one's task table by query.

        Pending reasons come from the job's memo (the scheduler tells the job when its reason
        changes); a job whose memo has none yet asks the scheduler, as before.
        """
        st, answered = await self._answered_status(job_id)
        reason = ""
        if not answered and st.state in ("", JobState.PENDING):
            # The reason the job last heard (its memo) may be old: say so, and why no newer one comes.
            reason = f"{st.pending_reason} ({CONTROLLER_SILENT})" if st.pending_reason else CONTROLLER_DOWN_REASON
        elif st.state in ("", JobState.PENDING, JobState.RUNNING) and st.task_state_counts.get(TaskState.PENDING, 0):
            reason = st.pending_reason or await self._scheduler_reason(job_id)
        return await self._placed_in_queue(_job_status(st, reason))

    async def _placed_in_queue(self, status: JobStatus) -> JobStatus:
        """The status with its team, queue position and estimated start (the scheduler's memo: team_tables)."""
        return (await team_tables.queue_view(self.temporal)).apply(status)

    async def _scheduler_reason(self, job_id: str) -> str:
        try:
            return await self.temporal.get_workflow_handle(SCHEDULER_WORKFLOW_ID).query(
                PENDING_REASON, job_id, result_type=str, rpc_timeout=self.query_timeout
            )
        except RPCError as err:
            log.warning("scheduler_not_answering", job_id=job_id, error=err.message)
            return CONTROLLER_DOWN_REASON

    async def visible_status(self, job_id: str) -> JobStatus:
        """The job as visibility holds it (one describe call, no workflow queried); no task table."""
        desc = await describe_job(self.temporal, job_id)
        status = _visible_status(job_id, await desc.memo(), desc.typed_search_attributes, desc.start_time.timestamp())
        return await self._placed_in_queue(status)

    async def wait(self, job_id: str, timeout: float | None = None, poll: float = 0.5,
                   on_progress: Callable[[JobStatus], None] | None = None) -> JobStatus:
        """Wait for the job to finish: a long poll on its workflow's result, no query.

        With `on_progress`, it is called every `poll` seconds with the job as visibility
        shows it (state, counts, pending reason; no task table), then once with the final status.
        """
        handle = self.temporal.get_workflow_handle(job_id, result_type=pb.JobStatus)
        deadline = None if timeout is None else time.monotonic() + timeout
        result = asyncio.ensure_future(handle.result())
        try:
            while True:
                wait_for = None if on_progress is None else poll
                if deadline is not None:
                    left = max(0.0, deadline - time.monotonic())
                    wait_for = left if wait_for is None else min(wait_for, left)
                done, _ = await asyncio.wait({result}, timeout=wait_for)
                if done:
                    try:
                        final = result.result()
                    except WorkflowFailureError as err:
                        final = _failed_job_status(err)
                        final = final or await self._raw_status(job_id)
                    except RPCError as err:
                        if is_missing(err):
                            raise KeyError(f"no such job: {job_id}") from None
                        if err.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                            raise
                        # Too many long polls on this namespace (the server caps them, ~1,200 on the dev
                        # server): watch the job through describe instead, and poll again once it closed.
                        log.info("long_poll_refused", job_id=job_id, error=err.message)
                        result = asyncio.ensure_future(self._result_when_closed(handle, poll))
                        continue
                    final = await self._whole_table(job_id, final)
                    if JobState(final.state) in TERMINAL_JOB_STATES and not is_summary(final):
                        self._results[job_id] = final
                    status = await self._placed_in_queue(_job_status(final))  # its team, as `status` gives it
                    if on_progress:
                        on_progress(status)
                    return status
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"job {job_id} did not finish within {timeout} s")
                if on_progress:
                    on_progress(await self.visible_status(job_id))
        finally:
            result.cancel()

    async def _result_when_closed(self, handle: WorkflowHandle[Any, pb.JobStatus], poll: float) -> pb.JobStatus:
        """The job's result, reading its history only once describe says it has closed (no long poll)."""
        delay = poll
        while True:
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, MAX_DESCRIBE_INTERVAL)
            try:
                desc = await handle.describe()
            except RPCError as err:
                if err.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                    raise
                continue
            if desc.status is not None and desc.status != WorkflowExecutionStatus.RUNNING:
                return await handle.result()

    async def results(self, job_id: str, *, partial: bool = False, trust: bool = False) -> list[Any]:
        """Each task's return value by task index; JobFailedError unless the job succeeded (or `partial`).

        With `partial=True`, tasks without a result (failed, killed, still running) give None. `trust` is the
        team-mode client's (iris/auth/remote.py): without team mode there is one user, whose results these are.
        """
        st = await self._raw_status(job_id)
        if not partial and JobState(st.state or JobState.PENDING) != JobState.SUCCEEDED:
            status = _job_status(st)
            if not status.done:
                raise JobFailedError(status, f"job {job_id} has not finished ({status.state}); "
                                     "wait() for it, or ask for results(partial=True)")
            raise JobFailedError(status)
        if is_summary(st):
            raise RuntimeError(f"job {job_id}: its {st.num_tasks} task rows could not be read (is its controller "
                               "running? `iris cluster status`); try again")
        out = []
        for t in st.tasks:
            key = expand_row(st.job_id, st.compact, t)[1] if t.state == TaskState.SUCCEEDED else t.result_blob
            data = await asyncio.to_thread(self._result_data, key, st.compact) if key else None
            out.append(unpickle_result(data) if data is not None else None)
        return out

    def _result_data(self, key: str, derived: bool) -> bytes | None:
        """A task's stored result; a key derived for a compact table may have nothing (a command's task)."""
        if derived and not self.blobs.exists(key):
            return None
        return self.blobs.get(key)

    async def list_jobs(self, limit: int = 200, *, state: str | None = None, user: str | None = None,
                        name: str | None = None, parent: str | None = None, namespace: str | None = None,
                        under: str | None = None, page_size: int = 200) -> list[JobStatus]:
        """Jobs newest first, from one paged visibility listing (no workflow is queried); no task tables.

        `parent` lists one job's children, `under` every job below it, `namespace` the jobs of one namespace.
        """
        if state is not None and (not isinstance(state, str) or state.upper() not in JobState.__members__):
            raise ValueError(f"state must be one of {', '.join(JobState)}, got {state!r}")
        query = _visibility_query(state and state.upper(), user, name, parent, namespace, under)
        out: list[JobStatus] = []
        async for wf in self.temporal.list_workflows(query, limit=limit, page_size=page_size):
            out.append(await self._listed_status(wf))
        view = await team_tables.queue_view(self.temporal)  # one describe for the whole listing
        return [view.apply(status) for status in out]

    async def _listed_status(self, wf: WorkflowExecution) -> JobStatus:
        return _visible_status(wf.id, await wf.memo(), wf.typed_search_attributes, wf.start_time.timestamp())

    async def _require_job(self, job_id: str) -> None:
        """KeyError unless `job_id` names a job (not the scheduler, a task or a worker workflow)."""
        await describe_job(self.temporal, job_id)

    async def terminate(self, job_id: str, reason: str = "killed by user") -> bool:
        """Stop the job and every unfinished job below it; False if none of them still ran. KeyError if unknown.

        The descendants are killed first, by this call: a job whose workflow was ended from outside
        Iris (`temporal workflow terminate`) never ran its own cleanup, and this still kills its tree.
        Idempotent.
        """
        await self._require_job(job_id)
        descendants = await kill_tree(self.temporal, job_id, "was killed")
        try:
            await self.temporal.get_workflow_handle(job_id).signal(KILL_JOB, reason)
        except RPCError as err:
            if "already completed" in str(err):
                return descendants > 0
            if is_missing(err):
                raise KeyError(f"no such job: {job_id}") from None
            raise
        return True

    def fetch_task_logs(self, job_id: str, task_index: int) -> list[str]:
        return self.logs.read_lines(job_id, task_index)

    def read_new_logs(self, job_id: str, task_index: int, cursor: LogCursor | None) -> tuple[list[str], LogCursor]:
        return self.logs.read_new(job_id, task_index, cursor)
