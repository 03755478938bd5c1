"""The cluster-wide reads and operator calls of `AsyncIrisClient`: workers, slices, users, reservations.

A mixin, so the job client (iris/client/async_client.py) stays about jobs; everything here goes through
`self.temporal` (the scheduler's queries and memo, the fleet's signals).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import structlog
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import SCHEDULER_WORKFLOW_ID, SUMMARY_QUERY, WORKERS_QUERY
from activities.contracts.worker_pages import all_workers
from activities.proto import cluster_pb2 as pb
from iris.client.reservation_requests import ReservationStatus, read_published
from iris.client.status_reads import _worker_status
from iris.client.views import fleet_view, team_tables, user_balances
from iris.client.views.team_tables import QueueRow
from iris.controller.workflow_health import FAILING_CHECK_AFTER, failing_line, workflow_task_failure
from iris.types import SliceStatus, TeamStatus, UserStatus, WorkerStatus

log = structlog.get_logger("iris.client.iris_client")

QUERY_TIMEOUT = timedelta(seconds=5)
"""How long a status query waits for the controller before Iris answers from Temporal alone."""
READ_RETRY_SECONDS = 30.0
"""How long a read of the scheduler's state keeps asking while the controller is away (a restart takes seconds)."""
_CONTROLLER_AWAY = frozenset({
    RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.CANCELLED,
    RPCStatusCode.FAILED_PRECONDITION,  # "no poller seen for task queue recently"
})  # fmt: skip

T = TypeVar("T")


class SchedulerFailingError(RuntimeError):
    """The scheduler's workflow task keeps failing: it answers nothing until someone acts (the message says why)."""


async def ask_scheduler(
    temporal: Client, query: str, result_type: type[T], budget: float = READ_RETRY_SECONDS, *args: Any
) -> T:
    """Query the scheduler, asking again while the controller is away (restarting, stalled) for up to `budget` s.

    A query is answered by the controller's workflow worker: right after a controller (or
    server) restart there may be none for a few seconds, which is no reason to fail a read.
    Each try waits at most QUERY_TIMEOUT; the last failure is raised once `budget` is spent.
    A scheduler whose workflow task fails will not answer however long one waits: once a try has gone
    FAILING_CHECK_AFTER without an answer, SchedulerFailingError with the failure's line, at once.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget
    delay = 0.2
    while True:
        remaining = deadline - loop.time()
        ask = asyncio.ensure_future(asyncio.wait_for(
            temporal.get_workflow_handle(SCHEDULER_WORKFLOW_ID).query(
                query, *args, result_type=result_type,
                rpc_timeout=timedelta(seconds=max(0.1, min(QUERY_TIMEOUT.total_seconds(), remaining))),
            ),
            max(0.1, min(QUERY_TIMEOUT.total_seconds(), remaining)) + 0.5,
        ))  # fmt: skip
        try:
            if not (await asyncio.wait({ask}, timeout=FAILING_CHECK_AFTER))[0]:
                failing = await _failing(temporal)  # a failing task answers nothing: no need to wait it out
                if failing is not None:
                    raise SchedulerFailingError(failing)
            return await ask
        except (RPCError, TimeoutError) as err:
            transient = isinstance(err, TimeoutError) or err.status in _CONTROLLER_AWAY
            if not transient:
                raise
            failing = await _failing(temporal)
            if failing is not None:
                raise SchedulerFailingError(failing) from None
            if loop.time() + delay >= deadline:
                raise
            log.info("scheduler_not_answering", query=query, error=str(err), retry_in=delay)
        finally:
            ask.cancel()
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        delay = min(delay * 2, 2.0)


async def _failing(temporal: Client) -> str | None:
    """"scheduler workflow task failing: <error>", or None (also when Temporal cannot say)."""
    try:
        failure = await workflow_task_failure(temporal, SCHEDULER_WORKFLOW_ID)
    except RPCError:
        return None
    return failing_line("scheduler", failure) if failure else None


class ClusterReads:
    """What `AsyncIrisClient` asks of the scheduler and the fleet rather than of one job."""

    temporal: Client

    async def _ask_scheduler(self, query: str, result_type: type[T], budget: float = READ_RETRY_SECONDS) -> T:
        return await ask_scheduler(self.temporal, query, result_type, budget)

    async def list_workers(self) -> list[WorkerStatus]:
        workers = await all_workers(
            lambda after: ask_scheduler(self.temporal, WORKERS_QUERY, pb.WorkerList, READ_RETRY_SECONDS, after)
        )
        return [_worker_status(w) for w in workers]

    async def list_slices(self, include_ended: bool = False) -> list[SliceStatus]:
        return await fleet_view.list_slices(self.temporal, include_ended)

    async def autoscaler_status(self) -> fleet_view.AutoscalerStatus | None:
        """Each scale group's slices by state and why it is not scaling up; None when no autoscaler runs."""
        return await fleet_view.autoscaler_status(self.temporal)

    async def list_users(self) -> list[UserStatus]:
        """Users' credits, usage, running tasks and pending jobs, as the scheduler publishes them."""
        return await user_balances.list_users(self.temporal)

    async def user_status(self, user: str) -> UserStatus | None:
        """One user's credits and usage; one never seen starts from the default credits (None: none published)."""
        return await user_balances.user_status(self.temporal, user)

    async def list_teams(self) -> list[TeamStatus]:
        """Teams' quotas, use, borrowing and lending and pending jobs, as the scheduler publishes them."""
        return await team_tables.list_teams(self.temporal)

    async def queue(self) -> list[QueueRow]:
        """The waiting jobs in scheduling order, with positions and estimated starts."""
        return await team_tables.queue(self.temporal)

    async def set_credits(self, user: str, amount: float) -> None:
        """An operator's call: set `user`'s remaining balance."""
        await user_balances.set_credits(self.temporal, user, amount)

    async def drain_worker(self, worker_id: str, timeout: float | None = None, poll: float = 1.0,
                           on_progress: Callable[[WorkerStatus], None] | None = None) -> WorkerStatus:
        """Cordon the worker, then wait until it runs no task (they finish, as Slurm's drain); TimeoutError.

        A `timeout` that is not a number of seconds >= 0 (or None: wait as long as it takes) is a ValueError
        before the worker is cordoned.
        """
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0
        ):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        await fleet_view.cordon_worker(self.temporal, worker_id, reason="drained by user")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            worker = next((w for w in await self.list_workers() if w.worker_id == worker_id), None)
            if worker is None or not worker.running_tasks:
                return worker or WorkerStatus(worker_id, False, {}, 0.0, 0, (), cordoned=True)
            if on_progress:
                on_progress(worker)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"worker {worker_id} still runs {len(worker.running_tasks)} tasks after {timeout} s")
            await asyncio.sleep(poll)

    async def list_reservations(self) -> list[ReservationStatus]:
        """Reservations as the scheduler last published them (its memo: no query to the scheduler)."""
        return await read_published(self.temporal)

    async def scheduler_failure(self) -> str | None:
        """"scheduler workflow task failing: <error>" while the scheduler's workflow task fails, else None."""
        return await _failing(self.temporal)

    async def summary(self, budget: float = READ_RETRY_SECONDS) -> pb.ClusterSummary:
        """The scheduler's counts, asking for up to `budget` seconds while the controller is away."""
        return await self._ask_scheduler(SUMMARY_QUERY, pb.ClusterSummary, budget)
