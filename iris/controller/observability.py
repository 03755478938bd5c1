"""`/health` and `/metrics` for the daemons (`iris controller serve`, `iris worker serve`).

An orchestrator (compose, Kubernetes) restarts what answers 503 and a Prometheus scrapes what
answers `/metrics`. Health is checked when asked, not cached: Temporal answers a health check, and
the daemon's own Temporal worker is polling (the controller's worker task is running; an agent's
session activity heartbeated within the last few seconds).

Iris's own metrics are counted where the work happens, through a Temporal interceptor that the
daemons' clients carry into their workers (no change to activity code): scheduling pass time on
the controller, tasks started/finished and session heartbeats on agents. Jobs by state, pending
tasks and workers are read from Temporal (visibility counts, the scheduler's summary) at scrape
time. The Temporal SDK's own metrics (poll latencies, slots, task failures) come from its
Prometheus exporter on a private loopback port and are appended to `/metrics`, so one scrape
target has both.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from temporalio import activity
from temporalio.client import Client
from temporalio.client import Interceptor as ClientInterceptor
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
)
from temporalio.worker import Interceptor as WorkerInterceptor

from activities.contracts import RUN_TASK, WORKER_SESSION
from activities.scheduling import FIND_ASSIGNMENTS

log = structlog.get_logger("iris.controller.observability")

HEARTBEAT_FRESH_SECONDS = 10.0
"""An agent whose session has not heartbeated for this long is not serving (it beats every second)."""
TEMPORAL_CHECK_TIMEOUT = 3.0

REGISTRY = CollectorRegistry()
JOBS = Gauge("iris_jobs", "Jobs by state (Temporal visibility)", ["state"], registry=REGISTRY)
PENDING_TASKS = Gauge("iris_pending_tasks", "Tasks waiting for a place (the scheduler's queue)", registry=REGISTRY)
PLACED_TASKS = Gauge("iris_placed_tasks", "Tasks placed on a worker", registry=REGISTRY)
WORKERS = Gauge("iris_workers", "Registered workers by health", ["healthy"], registry=REGISTRY)
SCHEDULING_PASS = Histogram(
    "iris_scheduling_pass_seconds", "Time of one scheduling pass (find_assignments)", registry=REGISTRY,
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
TASKS_STARTED = Counter("iris_tasks_started", "Task attempts started on this agent", registry=REGISTRY)
TASKS_FINISHED = Counter(
    "iris_tasks_finished", "Task attempts ended on this agent, by outcome", ["outcome"], registry=REGISTRY
)
HEARTBEATS = Counter("iris_worker_heartbeats", "Session heartbeats sent by this agent", registry=REGISTRY)
LAST_HEARTBEAT = Gauge(
    "iris_worker_last_heartbeat_timestamp_seconds", "When this agent's session last heartbeated", registry=REGISTRY
)


class MetricsInterceptor(ClientInterceptor, WorkerInterceptor):
    """Counts Iris's activities as they run; given to a client, it is used by that client's workers too."""

    def __init__(self) -> None:
        self.last_heartbeat: float | None = None  # monotonic time of the session's last beat

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityMetrics(next, self)


class _HeartbeatMetrics(ActivityOutboundInterceptor):
    def __init__(self, next: ActivityOutboundInterceptor, owner: MetricsInterceptor) -> None:
        super().__init__(next)
        self.owner = owner

    def heartbeat(self, *details: Any) -> None:
        if activity.info().activity_type == WORKER_SESSION:
            HEARTBEATS.inc()
            LAST_HEARTBEAT.set_to_current_time()
            self.owner.last_heartbeat = time.monotonic()
        super().heartbeat(*details)


class _ActivityMetrics(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, owner: MetricsInterceptor) -> None:
        super().__init__(next)
        self.owner = owner

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        super().init(_HeartbeatMetrics(outbound, self.owner))

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        kind = activity.info().activity_type
        if kind == FIND_ASSIGNMENTS:
            with SCHEDULING_PASS.time():
                return await _maybe_await(super().execute_activity(input))
        if kind == WORKER_SESSION:
            self.owner.last_heartbeat = time.monotonic()  # a session that just started counts as fresh
        if kind != RUN_TASK:
            return await _maybe_await(super().execute_activity(input))
        TASKS_STARTED.inc()
        try:
            result = await _maybe_await(super().execute_activity(input))
        except BaseException as err:
            TASKS_FINISHED.labels("cancelled" if isinstance(err, asyncio.CancelledError) else "error").inc()
            raise
        exit_code = getattr(result, "exit_code", None)
        TASKS_FINISHED.labels("succeeded" if exit_code == 0 and not getattr(result, "error", "") else "failed").inc()
        return result


async def _maybe_await(value: Any) -> Any:
    """Sync activities return their value from the inbound interceptor; async ones a coroutine."""
    return await value if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future) else value


def sdk_runtime(port: int) -> Runtime:
    """A Temporal runtime exporting the SDK's metrics on 127.0.0.1:`port` (appended to our `/metrics`)."""
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"127.0.0.1:{port}")))


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=3) as response:
        data: bytes = response.read()
        return data


@dataclass
class HealthServer:
    """Serves `/health` (200/503 with the checks as JSON) and `/metrics` on `port`."""

    port: int
    checks: Callable[[], Awaitable[dict[str, bool]]]
    refresh: Callable[[], Awaitable[None]] | None = None
    sdk_metrics_port: int | None = None
    host: str = "127.0.0.1"
    """Loopback unless told: `--health-host 0.0.0.0` (IRIS_HEALTH_HOST) in a container, probed from outside."""
    _runner: web.AppRunner | None = field(default=None, init=False)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        log.info("health_serving", port=self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, _: web.Request) -> web.Response:
        try:
            checks = await self.checks()
        except Exception as err:  # a check that crashes is a failed check, not a 500
            checks = {"checks_ran": False}
            log.warning("health_check_failed", error=str(err))
        ok = all(checks.values())
        body = {"status": "ok" if ok else "unavailable", "checks": checks}
        return web.Response(status=200 if ok else 503, text=json.dumps(body), content_type="application/json")

    async def _metrics(self, _: web.Request) -> web.Response:
        if self.refresh is not None:
            try:
                await self.refresh()
            except Exception as err:  # Temporal down: serve what we have; /health says the rest
                log.warning("metrics_refresh_failed", error=str(err))
        body = generate_latest(REGISTRY)
        if self.sdk_metrics_port is not None:
            try:
                body += await asyncio.to_thread(_fetch, f"http://127.0.0.1:{self.sdk_metrics_port}/metrics")
            except OSError as err:
                log.warning("sdk_metrics_unavailable", error=str(err))
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def temporal_reachable(client: Client) -> bool:
    """Whether Temporal's frontend answers its health check within a few seconds."""
    try:
        return bool(await asyncio.wait_for(client.service_client.check_health(), TEMPORAL_CHECK_TIMEOUT))
    except Exception:
        return False


def heartbeat_fresh(interceptor: MetricsInterceptor) -> bool:
    last = interceptor.last_heartbeat
    return last is not None and time.monotonic() - last < HEARTBEAT_FRESH_SECONDS
