"""The dashboard's web server: aiohttp handlers that render Jinja templates from `ClusterReads`.

Read-only: every handler is a GET and nothing here signals a workflow. Each page renders whole on
the server (no build step, no script needed to see data); `static/dashboard.js` refreshes the page's
main part every few seconds by fetching the same URL with `X-Iris-Partial: 1`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
import structlog
from aiohttp import web
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

from activities.contracts import (
    CONFIGURE_SCHEDULER,
    JOB_STATE_ATTRIBUTE,
    JOB_USER_ATTRIBUTE,
    SCHEDULER_WORKFLOW_ID,
    task_workflow_id,
)
from activities.contracts.fleet import ControlPlaneAddress
from iris.auth.api import Gate, IrisApi, may
from iris.auth.rules import Action
from iris.client import schedule_calls
from iris.client.async_client import AsyncIrisClient
from iris.client.views.team_tables import QueueView, amounts, scheduler_memo, teams_from_memo, when
from iris.client.views.user_balances import list_users
from iris.controller.workflow_health import failing_line, served_since_last_signal, workflow_task_failure
from iris.dashboard import actions as action_log
from iris.dashboard import login, temporal_proxy
from iris.dashboard.charts import DepthHistory, capacity_bars, depth_line
from iris.dashboard.depth import SAVE_SECONDS, DepthStore
from iris.dashboard.links import TemporalUI
from iris.dashboard.reads import (
    JOBS_QUERY,
    WAITED,
    ClusterReads,
    Waited,
    decode_token,
    encode_token,
    quoted,
    session_prefix,
)
from iris.dashboard.views import (
    PAGE_SIZE,
    Slice,
    WorkerFilter,
    as_tree,
    attributes,
    duration,
    group_usage,
    paginate,
    parse_page,
    task_counts,
    worker_state,
)
from iris.types import JobState
from iris.units import format_memory
from workflows.fleet.autoscaler_state import GroupStatus

log = structlog.get_logger("iris.dashboard")

REFRESH_SECONDS = 3
STALE_HEADER = "X-Iris-Stale"
"""Set on a page built from a cached read past its ttl: the live refresh (static/dashboard.js) asks again soon,
when the fresh read this request started is there, rather than showing the old one for a whole period."""
SAMPLE_SECONDS = 5.0
"""How often the queue depth is sampled for its picture (kept for the last hour)."""
LOG_TAIL_LINES = 60
TASKS_PER_PAGE = 100
PAGES = ("actions", "queue", "jobs", "schedules", "users", "teams", "reservations", "workers", "fleet")
Handler = Callable[[web.Request], Awaitable[dict[str, Any]]]


def _ts(at: float | None) -> str:
    if not at:
        return ""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _ago(at: float | None) -> str:
    return duration(at, time.time()) + " ago" if at else ""


def group_now(group: GroupStatus, unmet: Mapping[str, str]) -> str:
    """What a scale group does now, in the words `iris autoscaler status` uses (the fleet page had its own)."""
    from iris.client.views.autoscaler_view import explain_group

    lines = explain_group(group, dict(unmet), time.time())
    return next((line.removeprefix("now: ") for line in lines if line.startswith("now: ")), "")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("iris.dashboard", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        ts=_ts, ago=_ago, memory=lambda n: format_memory(int(n)) if n else "0",
        cpu=lambda millis: f"{millis / 1000:g}", path=lambda s: quote(str(s), safe=""),
    )  # fmt: skip
    env.globals.update(duration=duration, task_counts=task_counts, worker_state=worker_state, attributes=attributes,
                       group_now=group_now)
    return env


class Dashboard:
    """The pages of one cluster; `app()` is the aiohttp application that serves them."""

    def __init__(self, client: Client, ui: TemporalUI, store_url: str, cache_seconds: float = 2.0,
                 gate: Gate | None = None, control: ControlPlaneAddress | None = None) -> None:  # fmt: skip
        self.gate = gate  # team mode: every page and the Iris API need a credential (iris/dashboard/login.py)
        self.control = control  # team mode: what agents enrolling through the API are told
        self.reads = ClusterReads(client, cache_seconds)
        self.iris = AsyncIrisClient(client, store_url)
        self.ui = ui
        # Team mode: the UI only behind the login, for admins (iris/dashboard/temporal_proxy.py), when it has a
        # public path to be served under; links then go there.
        self.ui_upstream: str | None = None
        if gate is not None and temporal_proxy.served_path(ui.url):
            self.ui_upstream = ui.url
            self.ui = TemporalUI(temporal_proxy.served_path(ui.url), ui.namespace)
        elif gate is not None:
            log.warning("temporal_ui_not_served", url=ui.url,
                        reason="in team mode the dashboard serves the Temporal UI only under its public path")
        self.depth = DepthHistory()
        self.depth_store = DepthStore(store_url)
        self._depth_loaded = False
        self.env = _environment()
        self.env.globals["sessions_url"] = self.sessions_url
        self.env.globals["when"] = when
        self._sampler: asyncio.Task[None] | None = None

    def sessions_url(self, worker_id: str) -> str:
        """The Temporal UI's list of a worker's liveness-session workflows (its own, by id prefix)."""
        prefix = session_prefix(worker_id)
        return self.ui.search(f'WorkflowType = "WorkerWorkflow" AND WorkflowId STARTS_WITH "{prefix}"')

    def app(self) -> web.Application:
        app = web.Application(middlewares=[login.guard(self.gate)] if self.gate is not None else [])
        if self.gate is not None:
            api = IrisApi(self.iris, self.gate, self.control)
            api.add_routes(app)
            login.add_routes(app, self.gate, api)
            app.router.add_get("/audit", self._page(self.audit))
            if self.ui_upstream is not None:
                temporal_proxy.add_routes(app, self.ui_upstream)
        app.router.add_get("/", self._root)
        for name, handler in (
            ("/actions", self.actions), ("/queue", self.queue), ("/jobs", self.jobs),
            ("/jobs/{job_id:.+}", self.job), ("/users", self.users), ("/teams", self.teams),
            ("/reservations", self.reservations),
            ("/workers", self.workers), ("/workers/{worker_id}", self.worker), ("/fleet", self.fleet),
            ("/schedules", self.schedules),
        ):  # fmt: skip
            app.router.add_get(name, self._page(handler))
        static = resources.files("iris.dashboard") / "static"
        app.router.add_static("/static/", str(static))
        app.on_startup.append(self._start_sampler)
        app.on_cleanup.append(self._stop_sampler)
        return app

    # -- plumbing

    async def _root(self, _: web.Request) -> web.Response:
        raise web.HTTPFound("/queue")

    async def _scheduler_failing(self) -> str | None:
        """"scheduler workflow task failing: …" while it does, so a page says why it cannot be read."""
        try:
            failure = await asyncio.wait_for(workflow_task_failure(self.reads.client, SCHEDULER_WORKFLOW_ID), 3.0)
        except Exception:
            return None
        return failing_line("scheduler", failure) if failure else None

    def _page(self, handler: Handler) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def serve(request: web.Request) -> web.Response:
            started = time.perf_counter()
            waited = Waited()
            WAITED.set(waited)  # this request's own context (aiohttp runs each request in its own task)
            try:
                context = await handler(request)
            except (TimeoutError, RPCError, WorkflowQueryFailedError) as err:
                message = getattr(err, "message", "") or str(err) or type(err).__name__
                message = await self._scheduler_failing() or message  # the cause, when the scheduler is stuck
                log.warning("dashboard_read_failed", path=request.path, error=message)
                context = {"template": "unavailable.html", "page": request.path.strip("/").split("/")[0],
                           "title": "Unavailable", "error": message.splitlines()[0], "status": 503}  # fmt: skip
            context.setdefault("status", 200)
            partial = request.headers.get("X-Iris-Partial") == "1"
            viewer = login.viewer(request)
            html = self.env.get_template(context["template"]).render(
                partial=partial, pages=login.pages(PAGES, viewer), ui=self.ui, refresh=REFRESH_SECONDS,
                stale=waited.stale,
                team=self.gate is not None, viewer=viewer, may_kill=lambda owner: may(viewer, Action.KILL, owner),
                rendered_at=_ts(time.time()), **{k: v for k, v in context.items() if k != "template"},
            )  # fmt: skip
            elapsed = time.perf_counter() - started
            headers = {"Server-Timing": f"temporal;dur={waited.seconds * 1000:.1f}, total;dur={elapsed * 1000:.1f}",
                       "Cache-Control": "no-store"}  # fmt: skip
            if waited.stale:
                headers[STALE_HEADER] = "1"
            return web.Response(text=html, status=context["status"], content_type="text/html", headers=headers)

        return serve

    async def _start_sampler(self, _: web.Application) -> None:
        self._sampler = asyncio.create_task(self._sample())

    async def _stop_sampler(self, _: web.Application) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        if self._depth_loaded:
            await asyncio.to_thread(self.depth_store.save, self.depth)  # a controller stopped keeps its picture

    async def _sample(self) -> None:
        """Queue depth every SAMPLE_SECONDS from the scheduler's summary (the cached read every page shares).

        The samples saved in the store before a restart come first; they are saved again every SAVE_SECONDS.
        """
        await asyncio.to_thread(self.depth_store.load, self.depth)
        self._depth_loaded = True  # from now on a save keeps what was there before
        saved_at = time.monotonic()
        served = False  # the sampler starts with its controller: no query before the scheduler runs here
        while True:
            try:
                served = served or await served_since_last_signal(
                    self.reads.client, SCHEDULER_WORKFLOW_ID, CONFIGURE_SCHEDULER
                )
                if served:
                    self.depth.add((await self.reads.summary()).pending_tasks)
            except (TimeoutError, RPCError, WorkflowQueryFailedError) as err:
                log.debug("dashboard_sample_failed", error=str(err))
            if time.monotonic() - saved_at >= SAVE_SECONDS:
                await asyncio.to_thread(self.depth_store.save, self.depth)
                saved_at = time.monotonic()
            await asyncio.sleep(SAMPLE_SECONDS)

    @staticmethod
    def _query_args(request: web.Request, **changes: Any) -> str:
        args = {k: v for k, v in request.query.items() if v}
        args.update({k: str(v) for k, v in changes.items() if v not in (None, "")})
        for k, v in changes.items():
            if v in (None, ""):
                args.pop(k, None)
        return "?" + urlencode(args) if args else request.path

    # -- pages

    async def actions(self, request: web.Request) -> dict[str, Any]:
        flt = action_log.ActionFilter(
            job=request.query.get("job", "").strip(), user=request.query.get("user", "").strip(),
            worker=request.query.get("worker", "").strip(),
        )  # fmt: skip
        try:
            before = float(request.query["before"]) if request.query.get("before") else None
        except ValueError:
            before = None
        rows, cursor = await action_log.recent_actions(self.reads, flt, before)
        return {
            "template": "actions.html", "page": "actions", "title": "Actions", "filter": flt, "rows": rows,
            "next_url": self._query_args(request, before=repr(cursor)) if cursor is not None else "",
            "first_url": self._query_args(request, before=None) if before is not None else "",
        }  # fmt: skip

    async def audit(self, request: web.Request) -> dict[str, Any]:
        """Team mode's audit log, for admins (iris/auth/store.py)."""
        return await login.audit_page(self.gate, request)

    async def queue(self, request: web.Request) -> dict[str, Any]:
        text = request.query.get("job", "").strip()
        answer = await self.reads.queue()
        summary, snapshot = answer.summary, answer.snapshot
        queue = snapshot.queue
        job_ids = snapshot.job_ids
        places = QueueView.from_memo(await scheduler_memo(self.reads.client))  # the pass's estimates
        if places.places and places.team_of_user:  # teams: the pass's own order (quota first) where it published it
            rank = {job_id: row.position for job_id, row in places.places.items()}
            queue = sorted(queue, key=lambda j: rank.get(j.job_id, len(rank) + 1))
            job_ids = [j.job_id for j in queue]
        if text:  # positions of the matching jobs, then one page of them: only that page is read further
            positions: Sequence[int] = [i for i, job_id in enumerate(job_ids) if text in job_id]
        else:
            positions = range(len(queue))
        at = paginate(positions, parse_page(request.query.get("page")))
        shown = Slice([(i + 1, queue[i]) for i in at.rows], at.start, at.total, at.page, at.pages)
        visible = await self.reads.jobs_by_id([j.job_id for _, j in shown.rows])
        now = time.time()
        rows = []
        for position, job in shown.rows:
            row = visible.get(job.job_id)
            submitted = row.submitted_at if row else job.submitted_at or now
            band, asked = snapshot.band(job), snapshot.asked(job)
            rows.append({
                "position": position, "job": job, "row": row, "age": duration(submitted, now),
                "band": str(band), "asked": str(asked) if band != asked else "",
                "user": job.user or (row.user if row else ""), "reason": row.pending_reason if row else "",
                "team": places.team_of_user.get(job.user, "default") if places.team_of_user else "",
                "place": places.places.get(job.job_id),
            })  # fmt: skip
        return {
            "template": "queue.html", "page": "queue", "title": "Queue", "summary": summary, "rows": rows,
            "shown": shown, "text": text, "chart": depth_line(list(self.depth.samples)),
            "page_url": lambda p: self._query_args(request, page=p),
        }  # fmt: skip

    async def jobs(self, request: web.Request) -> dict[str, Any]:
        state = request.query.get("state", "").strip().upper()
        user = request.query.get("user", "").strip()
        text = request.query.get("job", "").strip()
        clauses = [JOBS_QUERY]
        if state in JobState.__members__:
            clauses.append(f"{JOB_STATE_ATTRIBUTE} = {quoted(state)}")
        else:
            state = ""
        if user:
            clauses.append(f"{JOB_USER_ATTRIBUTE} = {quoted(user)}")
        if text:
            clauses.append(f"WorkflowId STARTS_WITH {quoted(text)}")
        token = decode_token(request.query.get("token", ""))
        page = await self.reads.jobs(" AND ".join(clauses), 50, token)
        return {
            "template": "jobs.html", "page": "jobs", "title": "Jobs", "rows": as_tree(page.rows), "total": page.total,
            "state": state, "user": user, "text": text, "states": list(JobState), "now": time.time(),
            "next_url": self._query_args(request, token=encode_token(page.next_token)) if page.next_token else "",
            "first_url": self._query_args(request, token=None) if token else "",
        }  # fmt: skip

    async def job(self, request: web.Request) -> dict[str, Any]:
        job_id = request.match_info["job_id"]
        try:
            status = await self.iris.status(job_id)
        except KeyError:
            return {"template": "missing.html", "page": "jobs", "title": "No such job", "status": 404,
                    "what": f"job {job_id}"}  # fmt: skip
        visible = (await self.reads.jobs_by_id([job_id])).get(job_id)
        tasks = paginate(status.tasks, parse_page(request.query.get("page")), TASKS_PER_PAGE)
        chosen = request.query.get("task")
        failed = next((t.task_index for t in status.tasks if t.error or (t.exit_code or 0) != 0), None)
        index = int(chosen) if chosen and chosen.isdigit() else (failed if failed is not None else 0)
        tail: list[str] = []
        if self.gate is not None and not may(login.viewer(request), Action.LOGS, status.user):
            tail = [f"(team mode: the logs of {status.user}'s job are for its owner and admins)"]
        elif status.tasks and index < status.num_tasks:
            try:
                lines = await asyncio.to_thread(self.iris.fetch_task_logs, job_id, index)
                tail = lines[-LOG_TAIL_LINES:]
            except (OSError, ValueError) as err:
                tail = [f"(logs unavailable: {err})"]
        return {
            "template": "job.html", "page": "jobs", "title": f"Job {job_id}", "job": status, "row": visible,
            "tasks": tasks, "log_task": index, "tail": tail, "task_workflow_id": task_workflow_id,
            "page_url": lambda p: self._query_args(request, page=p), "now": time.time(),
            "log_url": lambda i: self._query_args(request, task=i) + "#logs",
        }  # fmt: skip

    async def schedules(self, request: web.Request) -> dict[str, Any]:
        """Every schedule (Temporal's list of schedules: one call, no workflow queried)."""
        return {"template": "schedules.html", "page": "schedules", "title": "Schedules",
                "schedules": await schedule_calls.list_all(self.iris), "utc": UTC}  # fmt: skip

    async def users(self, request: web.Request) -> dict[str, Any]:
        """The table the scheduler publishes in its memo (one describe, no query)."""
        return {"template": "users.html", "page": "users", "title": "Users",
                "users": await list_users(self.reads.client)}  # fmt: skip

    async def teams(self, request: web.Request) -> dict[str, Any]:
        """The team table the scheduler publishes in its memo (one describe, no query)."""
        return {"template": "teams.html", "page": "teams", "title": "Teams",
                "teams": teams_from_memo(await scheduler_memo(self.reads.client)), "amounts": amounts}  # fmt: skip

    async def reservations(self, request: web.Request) -> dict[str, Any]:
        reservations = await self.reads.reservations()
        return {"template": "reservations.html", "page": "reservations", "title": "Reservations",
                "reservations": reservations}  # fmt: skip

    async def workers(self, request: web.Request) -> dict[str, Any]:
        flt = WorkerFilter(
            text=request.query.get("q", "").strip(), state=request.query.get("state", "").strip(),
            attribute=request.query.get("attr", "").strip(),
        )  # fmt: skip
        page = parse_page(request.query.get("page"))
        answer = await self.reads.workers(flt.request((page - 1) * PAGE_SIZE, PAGE_SIZE))
        if answer.matched and answer.offset >= answer.matched:  # past the last page: show the last one
            page = -(-answer.matched // PAGE_SIZE)
            answer = await self.reads.workers(flt.request((page - 1) * PAGE_SIZE, PAGE_SIZE))
        rows = list(zip(answer.workers, answer.running_counts, strict=True))
        shown = Slice(rows, answer.offset, answer.matched, page, max(1, -(-answer.matched // PAGE_SIZE)))
        return {
            "template": "workers.html", "page": "workers", "title": "Workers", "filter": flt, "shown": shown,
            "answer": answer, "page_url": lambda p: self._query_args(request, page=p),
        }  # fmt: skip

    async def worker(self, request: web.Request) -> dict[str, Any]:
        worker_id = request.match_info["worker_id"]
        found = await self.reads.worker(worker_id)
        if found is None:
            return {"template": "missing.html", "page": "workers", "title": "No such worker", "status": 404,
                    "what": f"worker {worker_id}"}  # fmt: skip
        sessions, (recent, _) = await asyncio.gather(
            self.reads.worker_sessions(worker_id),
            action_log.recent_actions(self.reads, action_log.ActionFilter(worker=worker_id), limit=10),
        )
        running = list(found.running_tasks)
        return {
            "template": "worker.html", "page": "workers", "title": f"Worker {worker_id}", "w": found,
            "sessions": sessions, "recent": recent, "running": [(t, t.rsplit("/task-", 1)) for t in running[:500]],
            "more_running": max(0, len(running) - 500),
        }  # fmt: skip

    async def fleet(self, request: web.Request) -> dict[str, Any]:
        token = decode_token(request.query.get("token", ""))
        status, workers, slices = await asyncio.gather(
            self.reads.autoscaler(), self.reads.workers(WorkerFilter().request(0, 0)), self.reads.slices(50, token)
        )
        return {
            "template": "fleet.html", "page": "fleet", "title": "Fleet", "autoscaler": status, "slices": slices,
            "chart": capacity_bars(group_usage(workers)),
            "next_url": self._query_args(request, token=encode_token(slices.next_token)) if slices.next_token else "",
            "first_url": self._query_args(request, token=None) if token else "",
        }  # fmt: skip


class DashboardServer:
    """Serves a `Dashboard` on host:port until stopped (the controller starts one with `--dashboard-port`)."""

    def __init__(self, dashboard: Dashboard, port: int, host: str = "127.0.0.1") -> None:
        self.dashboard = dashboard
        self.port = port
        self.host = host
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._runner = web.AppRunner(self.dashboard.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:  # an ephemeral port (tests): read back the one bound
            server = getattr(site, "_server", None)
            sockets = getattr(server, "sockets", None) or []
            if sockets:
                self.port = sockets[0].getsockname()[1]
        log.info("dashboard_serving", url=self.url)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
