"""Whether the local cluster is up: the dev server answers, then the scheduler counts its workers healthy."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from activities.contracts import CONFIGURE_SCHEDULER, HEALTHY_WORKER_QUERY, SCHEDULER_WORKFLOW_ID
from iris.connection import connect_client

if TYPE_CHECKING:  # the SDK is imported when a check runs: the supervisor may never need it
    from temporalio.client import Client

_T = TypeVar("_T")


def run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run `coro` to completion from sync code, even when called inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def readiness_client(address: str, namespace: str = "default") -> Client:
    """The client the local cluster checks its own readiness and health with (the one place to configure it)."""
    return await connect_client(address, namespace=namespace)


async def wait_for_temporal(
    address: str,
    timeout: float = 30.0,
    *,
    abort_if: Callable[[], str | None] | None = None,
    log_file: Path | None = None,
) -> None:
    """Return once a Temporal client can connect to `address`; RuntimeError (naming `log_file`) if not.

    `abort_if` is polled between attempts; a non-None answer (e.g. "the server exited")
    fails at once instead of waiting out the timeout.
    """
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    see = f"; see {log_file}" if log_file else ""
    while True:
        if abort_if is not None and (reason := abort_if()) is not None:
            raise RuntimeError(f"Temporal server at {address} failed to start: {reason}{see}")
        try:
            # Each try is short: if another process listens on the port, the server's exit is noticed.
            await asyncio.wait_for(readiness_client(address), max(0.1, min(2.0, deadline - time.monotonic())))
            return
        except Exception as e:  # any failure means "not up yet"; the last one is reported
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"Temporal server at {address} did not answer within {timeout:.0f}s ({last}){see}"
            )
        await asyncio.sleep(0.1)


class StrandedError(RuntimeError):
    """The scheduler is pinned to a build no controller of this Iris serves (`stranded` says what to do)."""


class NotServedYetError(Exception):
    """No query yet: the run is not held by a live controller (see workflow_health.served_since_last_signal)."""


# How long the scheduler's workflow task must keep failing before readiness gives up at once.
FAILING_GRACE = 5.0


class FailingError(RuntimeError):
    """The scheduler's workflow task kept failing for FAILING_GRACE: waiting longer will not heal it."""


async def _failing(client: Client | None) -> str | None:
    """"scheduler workflow task failing: …" while it does (a task that fails will not heal by waiting)."""
    if client is None:
        return None
    from iris.controller.workflow_health import failing_line, workflow_task_failure

    try:
        failure = await asyncio.wait_for(workflow_task_failure(client, SCHEDULER_WORKFLOW_ID), 5.0)
    except Exception:  # not created yet, server busy: nothing to say
        return None
    return failing_line("scheduler", failure) if failure else None


async def _still_failing(client: Client | None, since: float | None, read: str) -> float | None:
    """Since when the scheduler's workflow task has been failing (None: it is not); FailingError past the grace."""
    failing = await _failing(client)
    if failing is None:
        return None
    if since is None:
        return time.monotonic()
    if time.monotonic() - since >= FAILING_GRACE:  # not one slow or unlucky task
        raise FailingError(f"local cluster failed to start: {failing}{read}")
    return since


async def pinned_build(client: Client, workflow_id: str) -> str:
    """The controller build a run is pinned to ("" when it is not pinned, or cannot be read)."""
    try:
        desc = await client.get_workflow_handle(workflow_id).describe()
    except Exception:  # not created yet, server busy: nothing to say
        return ""
    info = desc.raw_description.workflow_execution_info.versioning_info
    override = info.versioning_override
    if override.HasField("pinned") and override.pinned.version.build_id:
        return str(override.pinned.version.build_id)
    from temporalio.api.enums.v1 import VersioningBehavior

    if info.behavior == VersioningBehavior.VERSIONING_BEHAVIOR_PINNED:
        return str(info.deployment_version.build_id)
    return ""


def stranded(old: str, new: str, home: str) -> str:
    """Why a cluster whose scheduler is pinned to build `old` cannot come up on build `new`, and what to do."""
    return (f"its scheduler runs on Iris build {old}, which this Iris (build {new}) cannot continue: an upgrade "
            f"changed Iris's workflow code under a running cluster. Let its jobs end, then `iris cluster down`, "
            f"move {home} aside and `iris cluster up` (docs/operating.md, \"Upgrading Iris under a local cluster\")")


async def wait_until_ready(
    address: str,
    expected_workers: int,
    timeout: float = 60.0,
    *,
    log_files: Sequence[Path | str] = (),
    abort_if: Callable[[], str | None] | None = None,
    namespace: str = "default",
    build: str = "",
    home: str = "",
) -> None:
    """Return once the controller's `iris-scheduler` workflow reports `expected_workers` healthy workers.

    Any failure before then (server not up, workflow not yet created, no controller
    polling to answer the query) just means "not ready yet". On timeout, or when
    `abort_if` returns a reason, raise RuntimeError naming the log files to read; at once when the
    scheduler is pinned to another build than `build` (this Iris's: the controller it starts serves no other).
    """
    from iris.controller.workflow_health import FAILING_CHECK_AFTER, served_since_last_signal

    deadline = time.monotonic() + timeout
    last = "no answer yet"
    failing_since: float | None = None
    read = f"; read the logs: {', '.join(str(p) for p in log_files)}" if log_files else ""
    client: Client | None = None
    while True:
        if abort_if is not None and (reason := abort_if()) is not None:
            raise RuntimeError(f"local cluster failed to start: {reason}{read}")
        remaining = max(0.1, deadline - time.monotonic())
        try:
            if client is None:
                client = await asyncio.wait_for(readiness_client(address, namespace), remaining)
            handle = client.get_workflow_handle(SCHEDULER_WORKFLOW_ID)
            # Before anything that asks the scheduler: a run pinned to another build is answered by no controller
            # this Iris starts (a query on it waited out its 5 s timeout first, or the old run's last signal still
            # looked served), so it is said at once.
            old = await pinned_build(client, SCHEDULER_WORKFLOW_ID) if build else ""
            if old and old != build:
                raise StrandedError(f"local cluster failed to start: {stranded(old, build, home)}")
            if not await served_since_last_signal(client, SCHEDULER_WORKFLOW_ID, CONFIGURE_SCHEDULER):
                raise NotServedYetError("the scheduler has not run a workflow task on the new controller yet")
            ask = asyncio.ensure_future(asyncio.wait_for(
                handle.query(HEALTHY_WORKER_QUERY, rpc_timeout=timedelta(seconds=min(5.0, remaining))),
                remaining,
            ))  # fmt: skip
            try:
                answered = bool((await asyncio.wait({ask}, timeout=FAILING_CHECK_AFTER))[0])
                if not answered:
                    failing_since = await _still_failing(client, failing_since, read)
                # a failing task answers nothing: look again after the pause, not after the query's timeout
                count = await ask if answered or failing_since is None else None
            finally:
                ask.cancel()
            if count is None:
                last = "the scheduler's workflow task is failing"
            elif count >= expected_workers:  # slices the autoscaler started count too
                return
            else:
                last = f"scheduler reports {count} of {expected_workers} workers healthy"
        except (StrandedError, FailingError):
            raise
        except Exception as e:  # not ready yet; the last reason is reported on timeout
            last = f"{type(e).__name__}: {e}"
            failing_since = await _still_failing(client, failing_since, read)
        if time.monotonic() >= deadline:
            raise RuntimeError(f"local cluster not ready after {timeout:.0f}s ({last}){read}")
        await asyncio.sleep(0.25)
