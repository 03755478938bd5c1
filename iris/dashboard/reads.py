"""What the dashboard reads from Temporal, and the short cache that makes many viewers cost one read.

Everything comes from state Iris already keeps (design decision 10): Temporal visibility (search
attributes and memos of job, slice and worker workflows), the scheduler's and the autoscaler's
published state (the scheduler's `dashboard_*` queries, which filter and page its registry and hand the
queue page its summary and snapshot in one answer, and the autoscaler's `status`: one small query to a
singleton per page and refresh), and the store (log tails). No job is queried to fill a list; only a
job's own page asks that one job for its task table.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, NamedTuple, TypeVar

import structlog
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import SearchAttributeKey

from activities.contracts import (
    DASHBOARD_QUEUE_QUERY,
    DASHBOARD_WORKER_QUERY,
    DASHBOARD_WORKERS_QUERY,
    JOB_NAME_ATTRIBUTE,
    JOB_STATE_ATTRIBUTE,
    JOB_TASKS_ATTRIBUTE,
    JOB_USER_ATTRIBUTE,
    RECENT_ACTIONS_QUERY,
    SCHEDULER_WORKFLOW_ID,
)
from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.scheduling import queued_jobs, share_from_pb
from iris.client.reservation_requests import ReservationStatus, read_published
from iris.client.views import fleet_view
from iris.types import SliceStatus
from scheduler.scheduling import queue_order
from scheduler.sharing import FairQueue
from scheduler.types import DEFAULT_BAND, Band, parse_band
from workflows.fleet.autoscaler_state import AutoscalerStatus
from workflows.visibility import JobView

T = TypeVar("T")
log = structlog.get_logger("iris.dashboard")
QUERY_TIMEOUT = timedelta(seconds=5)
CACHE_SECONDS = 2.0
"""How long one read of the singletons' state serves every viewer (the pages refresh every few seconds)."""
MAX_STALE_SECONDS = 30.0
"""Older than this, a cached read is not served while it refreshes: the page waits for the fresh one."""
JOB_STATE = SearchAttributeKey.for_keyword(JOB_STATE_ATTRIBUTE)
JOB_NAME = SearchAttributeKey.for_keyword(JOB_NAME_ATTRIBUTE)
JOB_USER = SearchAttributeKey.for_keyword(JOB_USER_ATTRIBUTE)
JOB_TASKS = SearchAttributeKey.for_int(JOB_TASKS_ATTRIBUTE)
BAND_ATTRIBUTES = ("IrisPriority", "IrisBand")
"""Keyword search attributes a job's priority band is read from once the sharing work publishes one."""
PARENT_ATTRIBUTE = "IrisParentJob"
"""Keyword search attribute naming a child job's parent, once job trees publish one."""
JOBS_QUERY = "WorkflowType = 'JobWorkflow' AND ExecutionStatus != 'ContinuedAsNew'"


class Waited:
    """Wall time a request spent with at least one Temporal call in flight (its `Server-Timing` splits on it),
    and whether it was served a cached value past its ttl (`stale`: a fresh one is loading for the next)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.stale = False
        self._in_flight = 0
        self._since = 0.0

    @contextlib.asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        if self._in_flight == 0:
            self._since = time.perf_counter()
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.seconds += time.perf_counter() - self._since


WAITED: ContextVar[Waited | None] = ContextVar("iris_dashboard_waited", default=None)


@contextlib.asynccontextmanager
async def temporal_call() -> AsyncIterator[None]:
    """Count the enclosed call as time waiting for Temporal in the current request (if one is measured)."""
    waited = WAITED.get()
    if waited is None:
        yield
        return
    async with waited.call():
        yield


def quoted(value: str) -> str:
    """A string literal for a visibility query."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def encode_token(token: bytes | None) -> str:
    return base64.urlsafe_b64encode(token).decode() if token else ""


def decode_token(text: str) -> bytes | None:
    """A page token from a URL; a mangled one starts from the first page (ValueError is not worth a 500)."""
    if not text:
        return None
    try:
        return base64.b64decode(text.encode(), altchars=b"-_", validate=True) or None
    except (binascii.Error, ValueError):
        return None


class Cached(Generic[T]):
    """One value loaded at most every `ttl` seconds, however many requests ask at once (single flight).

    A value past its `ttl` is still served while a fresh one loads in the background, so a page never
    waits for a busy singleton's answer unless what it has is older than MAX_STALE_SECONDS (then it
    waits, and a failure reaches the page). With `ttl` 0 every call waits for a fresh value (the bench).
    """

    def __init__(self, load: Callable[[], Awaitable[T]], ttl: float = CACHE_SECONDS) -> None:
        self._load = load
        self._ttl = ttl
        self._box: tuple[T] | None = None  # the last value, boxed: the value itself may be None
        self._at = float("-inf")
        self._lock = asyncio.Lock()
        self._refreshing: asyncio.Task[None] | None = None

    def peek(self) -> T | None:
        """The last value loaded, however old (None before the first)."""
        return self._box[0] if self._box is not None else None

    async def _refresh(self) -> T:
        value = await self._load()
        self._box, self._at = (value,), time.monotonic()
        return value

    async def _refresh_quietly(self) -> None:
        try:
            await self._refresh()
        except Exception as err:  # the stale value stays; a page that needs fresher data waits and sees the error
            log.warning("dashboard_refresh_failed", error=str(err) or type(err).__name__)

    async def get(self) -> T:
        age = time.monotonic() - self._at
        if self._box is not None and self._ttl > 0 and age <= MAX_STALE_SECONDS:
            if age > self._ttl:
                if self._refreshing is None or self._refreshing.done():
                    self._refreshing = asyncio.create_task(self._refresh_quietly())
                if (waited := WAITED.get()) is not None:
                    waited.stale = True  # the page asks again soon, not a whole refresh period later
            return self._box[0]
        async with self._lock:
            if self._box is not None and 0 < self._ttl and time.monotonic() - self._at <= self._ttl:
                return self._box[0]  # another request loaded it while this one waited
            return await self._refresh()


class KeyedCache:
    """Visibility answers by their request, kept `ttl` seconds (the most recent `size` of them), loaded once.

    Many viewers of the same page (the same filters, the same page token) cost one visibility call per
    `ttl`; with `ttl` 0 nothing is kept (the bench). A failed load is not kept.
    """

    def __init__(self, ttl: float, size: int = 256) -> None:
        self._ttl = ttl
        self._size = size
        self._items: OrderedDict[Hashable, tuple[float, asyncio.Future[Any]]] = OrderedDict()

    async def get(self, key: Hashable, load: Callable[[], Awaitable[T]]) -> T:
        if self._ttl <= 0:
            return await load()
        now = time.monotonic()
        hit = self._items.get(key)
        if hit is not None and now - hit[0] <= self._ttl and not (hit[1].done() and hit[1].exception()):
            self._items.move_to_end(key)
            return await asyncio.shield(hit[1])  # type: ignore[no-any-return]
        future: asyncio.Future[T] = asyncio.ensure_future(load())
        self._items[key] = (now, future)
        while len(self._items) > self._size:
            self._items.popitem(last=False)
        try:
            return await asyncio.shield(future)
        except BaseException:
            if self._items.get(key, (0.0, None))[1] is future:
                del self._items[key]
            raise


def _keyword(wf: WorkflowExecution, name: str) -> str:
    for key, value in wf.typed_search_attributes:  # iterating pairs: no KeyError for an unknown name
        if key.name == name:
            return str(value)
    return ""


@dataclass(frozen=True)
class JobRow:
    """A job as visibility holds it: enough for a row in the queue, jobs and actions pages."""

    job_id: str
    name: str
    user: str
    state: str
    band: str
    parent: str
    num_tasks: int
    counts: dict[str, int]
    error: str
    pending_reason: str
    submitted_at: float
    finished_at: float
    status: str  # the workflow's execution status, e.g. RUNNING, COMPLETED, TERMINATED
    closed_at: float

    @classmethod
    def from_execution(cls, wf: WorkflowExecution, memo: Mapping[str, Any]) -> JobRow:
        view = JobView.from_memo(memo)
        attrs = wf.typed_search_attributes
        state = view.state or attrs.get(JOB_STATE) or "PENDING"
        if wf.status not in (None, WorkflowExecutionStatus.RUNNING) and state in ("PENDING", "RUNNING"):
            state = "KILLED"  # ended by hand (terminated): it never reported an end of its own
        band = next((b for b in (_keyword(wf, name) for name in BAND_ATTRIBUTES) if b), "")
        return cls(
            job_id=wf.id,
            name=attrs.get(JOB_NAME) or "",
            user=attrs.get(JOB_USER) or "",
            state=state,
            band=band,
            parent=_keyword(wf, PARENT_ATTRIBUTE),
            num_tasks=view.num_tasks or attrs.get(JOB_TASKS) or 0,
            counts=dict(view.counts),
            error=view.error,
            pending_reason=view.pending_reason,
            submitted_at=view.submitted_at or wf.start_time.timestamp(),
            finished_at=view.finished_at or (wf.close_time.timestamp() if wf.close_time else 0.0),
            status=wf.status.name if wf.status else "",
            closed_at=wf.close_time.timestamp() if wf.close_time else 0.0,
        )


@dataclass
class Page(Generic[T]):
    """One page of a listing and the token of the next (None on the last)."""

    rows: list[T]
    next_token: bytes | None = None
    total: int | None = None


BANDS: dict[str, Band] = {"": DEFAULT_BAND, **{str(b): b for b in Band}}
"""A queued job's band by the name in the snapshot ("": a request from before bands, the default band)."""


class QueuedJob(NamedTuple):
    """What ordering reads of a queued job (`scheduler.sharing.Queued`) and its place in the snapshot."""

    job_id: str
    priority: int
    band: Band
    user: str
    at: int  # its position in the snapshot


class Snapshot:
    """One answer of the scheduler's snapshot, decoded only as far as the queue page asks.

    Parsing is cheap (C); what costs is Python touching 10,000 jobs, so the queue is ordered once per
    answer from a light row per job (id, priority, band, user: all ordering reads) and the page reads
    the protobuf of the 50 jobs it shows. The scheduler re-encodes its snapshot at every pass (the
    time and each job's wait change); when the jobs' rows and the sharing part are those of the
    `previous` answer, and it is less than REORDER_SECONDS older, its order is kept (the same inputs
    but for the clock, whose only effect is a slow decay of usage) and only the rows are read again.
    """

    REORDER_SECONDS = MAX_STALE_SECONDS

    def __init__(self, data: bytes, previous: Snapshot | None = None) -> None:
        self.data = data
        raw = compressed.decompress(data, "snapshot") if data else b""
        self._message = pb.SchedulingSnapshot.FromString(raw)
        self._previous = previous
        self._queue: list[pb.SchedulingJob] | None = None
        self._rows: list[QueuedJob] = []
        self._share = b""
        self._order: list[int] = []  # positions in the snapshot, in queue order
        self._ordered_at = 0.0  # the snapshot time the order was worked out at
        self._bands: Mapping[str, Band] = {}
        self._ids: list[str] | None = None

    @property
    def queue(self) -> list[pb.SchedulingJob]:
        """The pending jobs in the order the scheduler's pass considers them: `scheduler.scheduling.queue_order`,
        the pass's own function, with the snapshot's sharing part (band, with a user out of credits in batch,
        then fair share among users, then priority and submission), as it tries them when none places."""
        if self._queue is None:
            message = self._message
            jobs = queued_jobs(message)
            self._rows = [QueuedJob(j.job_id, j.priority, BANDS.get(j.band) or parse_band(j.band, "band"), j.user, i)
                          for i, j in enumerate(jobs)]  # fmt: skip
            self._share = message.share.SerializeToString(deterministic=True) if message.HasField("share") else b""
            last, self._previous = self._previous, None  # one step back only: no chain of old answers kept
            if (last is not None and last._queue is not None and last._rows == self._rows
                    and last._share == self._share and 0 <= message.now - last._ordered_at <= self.REORDER_SECONDS):
                self._order, self._bands, self._ordered_at = last._order, last._bands, last._ordered_at
            else:
                ordered = queue_order(self._rows, share_from_pb(message, places=False))
                self._order = [row.at for row in ordered]
                self._bands = ordered.bands if isinstance(ordered, FairQueue) else {}
                self._ordered_at = message.now
            self._queue = [jobs[i] for i in self._order]
        return self._queue

    @staticmethod
    def asked(job: pb.SchedulingJob) -> Band:
        """The band the job asked for."""
        return BANDS.get(job.band) or parse_band(job.band, "band")

    def band(self, job: pb.SchedulingJob) -> Band:
        """The band the pass tries `job` in: the one it asked for, or batch when its user has no credits left."""
        _ = self.queue
        return self._bands.get(job.job_id) or self.asked(job)

    @property
    def job_ids(self) -> list[str]:
        """`queue`'s job ids, in its order (the queue page's filter searches these)."""
        if self._ids is None:
            self._ids = [job.job_id for job in self.queue]
        return self._ids


@dataclass(frozen=True)
class Queue:
    """One answer of the scheduler's `dashboard_queue` query: its summary and its snapshot, decoded."""

    summary: pb.ClusterSummary
    snapshot: Snapshot


@dataclass
class ClusterReads:
    """The dashboard's one way into Temporal; the singletons' state is cached for CACHE_SECONDS."""

    client: Client
    cache_seconds: float = CACHE_SECONDS
    _queue: Cached[Queue] = field(init=False)
    _summary: Cached[pb.ClusterSummary] = field(init=False)
    _autoscaler: Cached[AutoscalerStatus | None] = field(init=False)
    _actions: Cached[list[list[Any]]] = field(init=False)
    _reservations: Cached[list[ReservationStatus]] = field(init=False)
    _visibility: KeyedCache = field(init=False)

    def __post_init__(self) -> None:
        self._visibility = KeyedCache(self.cache_seconds)
        self._queue = Cached(self._load_queue, self.cache_seconds)
        self._summary = Cached(self._load_summary, self.cache_seconds)
        self._autoscaler = Cached(self._load_autoscaler, self.cache_seconds)
        self._actions = Cached(self._load_actions, self.cache_seconds)
        self._reservations = Cached(self._load_reservations, self.cache_seconds)

    # -- the singletons' published state

    def _scheduler(self) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(SCHEDULER_WORKFLOW_ID)

    async def _load_queue(self) -> Queue:
        """The summary and the compact snapshot (the scheduling pass's input, kept for the autoscaler) in one
        answer. A snapshot equal to the last one is not decoded again (the scheduler re-encodes it at each
        pass while work waits, so most refreshes decode)."""
        async with temporal_call():
            answer = await self._scheduler().query(
                DASHBOARD_QUEUE_QUERY, result_type=pb.DashboardQueue, rpc_timeout=QUERY_TIMEOUT
            )
        last = self._queue.peek()
        if last is not None and last.snapshot.data == answer.snapshot:
            return Queue(answer.summary, last.snapshot)
        previous = last.snapshot if last is not None else None
        return Queue(answer.summary, await asyncio.to_thread(_decode_queue, answer.snapshot, previous))

    async def _load_autoscaler(self) -> AutoscalerStatus | None:
        async with temporal_call():
            return await fleet_view.autoscaler_status(self.client)

    async def _load_actions(self) -> list[list[Any]]:
        async with temporal_call():
            rows: list[list[Any]] = await self._scheduler().query(
                RECENT_ACTIONS_QUERY, result_type=list[list[Any]], rpc_timeout=QUERY_TIMEOUT
            )
        return rows

    async def _load_summary(self) -> pb.ClusterSummary:
        async with temporal_call():
            return await self._scheduler().query(
                "summary", result_type=pb.ClusterSummary, rpc_timeout=QUERY_TIMEOUT
            )

    async def _load_reservations(self) -> list[ReservationStatus]:
        async with temporal_call():
            return await read_published(self.client)  # the scheduler's memo: a describe, not a query

    async def reservations(self) -> list[ReservationStatus]:
        return await self._reservations.get()

    async def queue(self) -> Queue:
        """The scheduler's summary and last snapshot: the snapshot's `queue` is the pending jobs in its order."""
        return await self._queue.get()

    async def workers(self, request: pb.DashboardWorkersRequest) -> pb.DashboardWorkers:
        """One page of the workers the request's filter keeps, and counts of all (filtered by the scheduler)."""

        async def load() -> pb.DashboardWorkers:
            async with temporal_call():
                return await self._scheduler().query(
                    DASHBOARD_WORKERS_QUERY, request, result_type=pb.DashboardWorkers, rpc_timeout=QUERY_TIMEOUT
                )

        return await self._visibility.get(("workers", request.SerializeToString(deterministic=True)), load)

    async def worker(self, worker_id: str) -> pb.WorkerStatus | None:
        """One worker with all its running tasks; None when the scheduler holds no such worker."""

        async def load() -> pb.WorkerStatus:
            async with temporal_call():
                return await self._scheduler().query(
                    DASHBOARD_WORKER_QUERY, worker_id, result_type=pb.WorkerStatus, rpc_timeout=QUERY_TIMEOUT
                )

        found = await self._visibility.get(("worker", worker_id), load)
        return found if found.worker_id else None

    async def summary(self) -> pb.ClusterSummary:
        return await self._summary.get()

    async def autoscaler(self) -> AutoscalerStatus | None:
        return await self._autoscaler.get()

    async def scheduler_actions(self) -> list[list[Any]]:
        """The scheduler's recent actions ([at, what, kind, subject, detail, ok] rows, oldest first)."""
        return await self._actions.get()

    # -- visibility

    async def list_page(self, query: str, page_size: int, token: bytes | None) -> Page[WorkflowExecution]:
        """One page of a visibility listing: running workflows newest first, then closed ones by close time."""

        async def load() -> Page[WorkflowExecution]:
            it = self.client.list_workflows(query, page_size=page_size, next_page_token=token,
                                            rpc_timeout=QUERY_TIMEOUT)  # fmt: skip
            async with temporal_call():
                await it.fetch_next_page()
            return Page(list(it.current_page or []), it.next_page_token)

        return await self._visibility.get(("list", query, page_size, token), load)

    async def count(self, query: str) -> int:
        async def load() -> int:
            async with temporal_call():
                return (await self.client.count_workflows(query, rpc_timeout=QUERY_TIMEOUT)).count

        return await self._visibility.get(("count", query), load)

    async def job_rows(self, executions: Sequence[WorkflowExecution]) -> list[JobRow]:
        memos = await asyncio.gather(*(wf.memo() for wf in executions))
        return [JobRow.from_execution(wf, memo) for wf, memo in zip(executions, memos, strict=True)]

    async def jobs(self, query: str, page_size: int, token: bytes | None, *, with_total: bool = True) -> Page[JobRow]:
        page, total = await asyncio.gather(
            self.list_page(query, page_size, token), self.count(query) if with_total else _none()
        )
        return Page(await self.job_rows(page.rows), page.next_token, total)

    async def jobs_by_id(self, job_ids: Sequence[str]) -> dict[str, JobRow]:
        """The visibility rows of these jobs, in one listing (a page of the queue names at most a few hundred)."""
        if not job_ids:
            return {}
        ids = ", ".join(quoted(j) for j in job_ids)
        page = await self.list_page(f"{JOBS_QUERY} AND WorkflowId IN ({ids})", len(job_ids) + 10, None)
        return {row.job_id: row for row in await self.job_rows(page.rows)}

    async def slices(self, page_size: int, token: bytes | None) -> Page[SliceStatus]:
        """Slices newest first (live ones, then ended ones Temporal still keeps), from visibility."""
        query = "WorkflowType = 'SliceWorkflow'"
        page, total = await asyncio.gather(self.list_page(query, page_size, token), self.count(query))
        memos = await asyncio.gather(*(wf.memo() for wf in page.rows))
        return Page([fleet_view.slice_status(wf, memo) for wf, memo in zip(page.rows, memos, strict=True)],
                    page.next_token, total)  # fmt: skip

    async def worker_sessions(self, worker_id: str) -> list[WorkflowExecution]:
        """The liveness-session workflows of one worker (newest first), found by their id prefix."""
        page = await self.list_page(
            f"WorkflowType = 'WorkerWorkflow' AND WorkflowId STARTS_WITH {quoted(session_prefix(worker_id))}", 5, None
        )
        return page.rows


def _decode_queue(data: bytes, previous: Snapshot | None) -> Snapshot:
    snapshot = Snapshot(data, previous)
    _ = snapshot.queue  # worked out here, off the event loop
    return snapshot


def session_prefix(worker_id: str) -> str:
    """Every liveness-session workflow id of a worker starts with this (see `worker_workflow_id`)."""
    return f"iris-worker-{worker_id}-session-"


async def _none() -> None:
    return None
