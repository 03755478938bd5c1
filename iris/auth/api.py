"""The Iris API of team mode: every call a user makes, verified, checked, audited, then done by the controller.

Users hold no Temporal credential. The controller serves this API (on its dashboard's port) and makes
the Temporal calls itself with its own connection, after:
1. verifying the credential (`Authorization: Bearer TOKEN`, or the dashboard's login cookie) into an
   `Identity` (iris/auth/verify.py);
2. checking the action against the role and, for a job, its owner (the user of the job, which is its
   root job's user: iris/auth/rules.py);
3. recording each mutation in the audit log (iris/auth/store.py).

Wire format: requests are JSON (the server never unpickles what a caller sends; a job request is its
protobuf bytes); answers are JSON for errors and a pickle of the public result types otherwise, which
the client (that trusts its cluster, as it trusts the results it unpickles) reads back. Errors map to
exceptions one to one: 401 AuthenticationError, 403 PermissionDeniedError, 404 KeyError, 400
ValueError, 504 TimeoutError, 409 JobFailedError (with its pickled status).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import pickle
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web
from google.protobuf.message import DecodeError

from activities.contracts import (
    EXEC_IN_TASK,
    PROFILE_TASK,
    TaskAccessInput,
    profile_blob_key,
    task_access_log_url,
)
from activities.contracts.fleet import ControlPlaneAddress
from activities.proto import cluster_pb2 as pb
from iris.auth import store
from iris.auth.errors import AuthenticationError, PermissionDeniedError
from iris.auth.rules import Action, Identity, Role, authorize, decide
from iris.auth.schedule_api import ScheduleRoutes
from iris.auth.verify import OidcVerifier, Verifiers
from iris.auth.wire import Handler, answer
from iris.client import schedule_calls, schedules
from iris.client.async_client import AsyncIrisClient
from iris.client.bundle import BUNDLE_PREFIX
from iris.client.endpoints import job_endpoints
from iris.client.job_control import IfExists, parse_if_exists
from iris.client.status_reads import _job_status
from iris.client.submission import resolve_user
from iris.client.task_access_runs import start_access
from iris.client.views import fleet_view
from iris.types import JobFailedError, JobState, TaskState
from worker_agent.object_store import open_log_store
from worker_agent.storage import LogCursor
from workflows.auth.auth_state import AuditEntry
from workflows.jobs.job_summary import is_summary
from workflows.visibility import expand_row

log = structlog.get_logger("iris.auth.api")

PREFIX = "/api/v1"
COOKIE = "iris_token"
WAIT_SLICE_SECONDS = 55.0
"""A `wait` call holds the request at most this long; the client asks again (proxies cut longer requests)."""
IDENTITY_KEY = web.AppKey("iris_identity", Identity)
OWNERS_KEPT = 10_000

def bearer(request: web.Request) -> str | None:
    """The request's credential: `Authorization: Bearer TOKEN`, else the login cookie."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.cookies.get(COOKIE) or None


def refusal(err: BaseException) -> web.Response:
    """The HTTP answer for an exception a handler raised (the client turns it back into the same type)."""
    match err:
        case AuthenticationError():
            response = web.json_response({"error": "authentication", "message": str(err)}, status=401)
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        case PermissionDeniedError():
            return web.json_response({"error": "permission", "message": str(err), "action": err.action,
                                      "job_id": err.job_id, "owner": err.owner}, status=403)  # fmt: skip
        case JobFailedError():
            body = {"error": "job_failed", "message": str(err),
                    "status": base64.b64encode(pickle.dumps(err.status)).decode()}  # fmt: skip
            return web.json_response(body, status=409)
        case KeyError():
            message = str(err.args[0]) if err.args else ""
            return web.json_response({"error": "not_found", "message": message}, status=404)
        case ValueError():
            return web.json_response({"error": "invalid", "message": str(err)}, status=400)
        case TimeoutError():
            return web.json_response({"error": "timeout", "message": str(err)}, status=504)
    return web.json_response({"error": "internal", "message": f"{type(err).__name__}: {err}"}, status=500)


class Gate:
    """Verifies credentials against the cluster's verifiers; what the API and the dashboard both use."""

    def __init__(self, verifiers: Verifiers, directory: store.Directory, oidc: OidcVerifier | None = None,
                 oidc_client_secret: str | None = None) -> None:  # fmt: skip
        self.verifiers = verifiers
        self.directory = directory
        # With an OIDC issuer and an audience, the dashboard signs users in there too (iris/dashboard/oidc_login.py).
        self.oidc = oidc
        self.oidc_client_secret = oidc_client_secret

    async def identify(self, request: web.Request) -> Identity:
        return await self.verifiers.identify(bearer(request))

    def audit(self, who: Identity, action: str, subject: str = "", detail: str = "", allowed: bool = True) -> None:
        self.directory.record(AuditEntry(time.time(), who.name, action, subject, detail, allowed))


class IrisApi:
    """The routes under /api/v1; `iris` is the controller's own client (its Temporal connection)."""

    def __init__(self, iris: AsyncIrisClient, gate: Gate, control: ControlPlaneAddress | None = None) -> None:
        self.iris = iris
        self.gate = gate
        self.control = control  # what an enrolling agent is told (as the agents the controller bootstraps are)
        self._owners: OrderedDict[str, str] = OrderedDict()

    def add_routes(self, app: web.Application) -> None:
        routes: list[tuple[str, str, Handler]] = [
            ("GET", "/whoami", self.whoami),
            ("GET", "/agent/enroll", self.enroll),
            ("POST", "/jobs", self.submit),
            ("GET", "/jobs", self.list_jobs),
            ("GET", "/job/status", self.status),
            ("GET", "/job/visible", self.visible),
            ("GET", "/job/exists", self.exists),
            ("POST", "/job/wait", self.wait),
            ("GET", "/job/results", self.results),
            ("GET", "/job/endpoints", self.endpoints),
            ("POST", "/job/kill", self.kill),
            ("GET", "/job/bug-report", self.bug_report),
            ("POST", "/job/logs", self.logs),
            ("POST", "/job/access", self.task_access),
            ("GET", "/cluster/{what}", self.cluster_read),
            ("POST", "/credits", self.set_credits),
            ("POST", "/fleet/{what}", self.fleet),
            ("POST", "/auth/users", self.add_user),
            ("POST", "/auth/revoke", self.revoke),
            ("GET", "/auth/audit", self.audit),
        ]
        routes += ScheduleRoutes(self).routes()
        for method, path, handler in routes:
            app.router.add_route(method, PREFIX + path, self._checked(handler))

    def _checked(self, handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def serve(request: web.Request) -> web.StreamResponse:
            who: Identity | None = None
            try:
                who = await self.gate.identify(request)
                return await handler(request, who)
            except (AuthenticationError, PermissionDeniedError, JobFailedError, KeyError, ValueError,
                    TimeoutError) as err:  # fmt: skip
                if isinstance(err, PermissionDeniedError):
                    log.info("refused", path=request.path, reason=str(err))
                    if who is not None and not err.audited:  # every refusal is in the audit log
                        action = err.action or request.path.removeprefix(PREFIX).strip("/")
                        self.gate.audit(who, action, err.job_id, "refused", allowed=False)
                return refusal(err)
            except web.HTTPException:
                raise
            except Exception as err:  # one answer per request, never a dropped connection
                log.warning("api_failed", path=request.path, error=str(err))
                return refusal(err)

        return serve

    async def owner(self, job_id: str) -> str:
        """The job's user (a child's is its root's: the tree's user); KeyError for an unknown job."""
        found = self._owners.get(job_id)
        if found is None:
            found = (await self.iris.visible_status(job_id)).user
            self._owners[job_id] = found
            while len(self._owners) > OWNERS_KEPT:
                self._owners.popitem(last=False)
        return found

    async def require(self, who: Identity, action: Action, job_id: str) -> None:
        if not isinstance(job_id, str) or not job_id:
            raise ValueError("job_id: missing")
        self.authorized(who, action, action.value, job_id, owner=await self.owner(job_id))

    def authorized(self, who: Identity, action: Action, label: str, subject: str, *, owner: str | None = None) -> None:
        """Allowed, or refused and audited as `label` on what it was about (the job, schedule, user or worker,
        and the owner when the rule is the owner's): `bo revoke ana (refused)`."""
        try:
            authorize(who, action, job_id=subject if owner is not None else "", owner=owner or "")
        except PermissionDeniedError as err:
            err.audited = True
            detail = "refused" if owner is None else f"refused (owner {owner})"
            self.gate.audit(who, label, subject, detail, allowed=False)
            raise

    def check_named_user(self, who: Identity, named: Any, action: str) -> None:
        """A caller naming a user (`connect(user=...)`, IRIS_USER) may name only themselves."""
        if named is not None and resolve_user(named) != who.name:
            self.gate.audit(who, action, "", f"refused: named user {named}", allowed=False)
            refused = PermissionDeniedError(
                f"{who.name} may not {action} as {named}: a job's user is its submitter's verified identity",
                action=action,
                owner=named,
            )
            refused.audited = True
            raise refused

    # -- identity

    async def whoami(self, request: web.Request, who: Identity) -> web.StreamResponse:
        return web.json_response({"name": who.name, "role": who.role.value, "via": who.via})

    async def enroll(self, request: web.Request, who: Identity) -> web.StreamResponse:
        """Where an agent serves (`iris worker serve --temporal http://API` with a worker credential): what
        the agents this controller bootstraps are told. Nothing secret: Temporal's own credentials, when
        its server wants them, stay on the host."""
        try:
            authorize(who, Action.SERVE)
        except PermissionDeniedError as err:
            err.audited = True
            self.gate.audit(who, Action.SERVE.value, detail="refused", allowed=False)
            raise
        if self.control is None:
            raise KeyError("this API serves no agents: its controller did not say where the control plane is")
        self.gate.audit(who, Action.SERVE.value, detail=request.query.get("worker_id", ""))
        c = self.control
        return web.json_response({"temporal_address": c.temporal_address, "namespace": c.namespace,
                                  "store_url": c.store_url, "env": c.extra_env})  # fmt: skip

    # -- jobs

    def verified_request(self, who: Identity, body: dict[str, Any], action: str) -> pb.JobRequest:
        """The caller's job request (a submission's, a schedule's), as its verified user's, with what names stored
        objects or another job left for the server to set: a request pointing at another job's function, bundle
        or launch blob would run (and show) that job's code as this user's."""
        authorize(who, Action.SUBMIT)
        self.check_named_user(who, body.get("user"), action)
        try:
            req = pb.JobRequest.FromString(base64.b64decode(body["request"]))
        except (DecodeError, binascii.Error, TypeError) as err:
            raise ValueError(f"request: not a job request ({err})") from None
        req.user = who.name
        req.job_id = req.parent_job_id = req.bundle_blob = req.launch_blob = ""
        if req.entrypoint.HasField("function_blob"):  # the function comes as the payload, stored by the server
            req.entrypoint.ClearField("function_blob")
        return req

    async def submit(self, request: web.Request, who: Identity) -> web.StreamResponse:
        body = await request.json()
        req = self.verified_request(who, body, "submit")
        if req.submitted_at:  # its place in the queue: this server's clock, never a backdated one (a schedule's is 0)
            req.submitted_at = time.time()
        payload = base64.b64decode(body["payload"]) if body.get("payload") else None
        if payload is None and not req.entrypoint.command.argv:
            raise ValueError("request: a job runs a command, or a function given as its payload")
        bundle = None
        if body.get("bundle"):  # content-addressed here, never by the caller's word (iris/client/bundle.py)
            data = base64.b64decode(body["bundle"][1])
            bundle = (f"{BUNDLE_PREFIX}{hashlib.sha256(data).hexdigest()}.zip", data)
        # A task's token names its job: what the task submits is that job's child, as in the Temporal path.
        if_exists = parse_if_exists(body.get("if_exists") or "new", req.name or None)
        job_id = await self.iris._start(req, payload=payload, bundle=bundle, given=frozenset(body.get("given", ())),
                                        if_exists=if_exists, parent=who.job)  # fmt: skip
        if if_exists is IfExists.NEW:  # a reused job may be older than this caller's word: its owner is looked up
            self._owners[job_id] = who.name
        self.gate.audit(who, "submit", job_id, req.name)
        return web.json_response({"job_id": job_id})

    async def list_jobs(self, request: web.Request, who: Identity) -> web.StreamResponse:
        authorize(who, Action.READ)
        q = request.query
        found = await self.iris.list_jobs(
            int(q.get("limit", "200")), state=q.get("state") or None, user=q.get("user") or None,
            name=q.get("name") or None, parent=q.get("parent") or None, namespace=q.get("namespace") or None,
            under=q.get("under") or None,
        )  # fmt: skip
        return answer(found)

    async def status(self, request: web.Request, who: Identity) -> web.StreamResponse:
        authorize(who, Action.READ)
        return answer(await self.iris.status(request.query["job_id"]))

    async def visible(self, request: web.Request, who: Identity) -> web.StreamResponse:
        authorize(who, Action.READ)
        return answer(await self.iris.visible_status(request.query["job_id"]))

    async def exists(self, request: web.Request, who: Identity) -> web.StreamResponse:
        authorize(who, Action.READ)
        await self.iris._require_job(request.query["job_id"])
        return web.json_response({"ok": True})

    async def wait(self, request: web.Request, who: Identity) -> web.StreamResponse:
        """The job's final status, or 202 if it did not finish within this call's slice (ask again)."""
        authorize(who, Action.READ)
        body = await request.json()
        timeout = min(float(body.get("timeout") or WAIT_SLICE_SECONDS), WAIT_SLICE_SECONDS)
        try:
            return answer(await self.iris.wait(body["job_id"], timeout=timeout))
        except TimeoutError:
            return web.json_response({"done": False}, status=202)

    async def results(self, request: web.Request, who: Identity) -> web.StreamResponse:
        """Each task's stored result, as bytes: the client unpickles them, never this server."""
        job_id = request.query["job_id"]
        await self.require(who, Action.LOGS, job_id)
        partial = request.query.get("partial") == "1"
        st = await self.iris._raw_status(job_id)
        if not partial and JobState(st.state or JobState.PENDING) != JobState.SUCCEEDED:
            status = _job_status(st)
            if not status.done:
                raise JobFailedError(status, f"job {job_id} has not finished ({status.state}); "
                                     "wait() for it, or ask for results(partial=True)")  # fmt: skip
            raise JobFailedError(status)
        if is_summary(st):
            raise ValueError(f"job {job_id}: its {st.num_tasks} task rows could not be read; try again")
        out: list[bytes | None] = []
        for t in st.tasks:
            key = expand_row(st.job_id, st.compact, t)[1] if t.state == TaskState.SUCCEEDED else t.result_blob
            out.append(await asyncio.to_thread(self.iris._result_data, key, st.compact) if key else None)
        return answer(out)

    async def endpoints(self, request: web.Request, who: Identity) -> web.StreamResponse:
        authorize(who, Action.READ)
        return answer(await job_endpoints(self.iris.temporal, request.query["job_id"]))

    async def bug_report(self, request: web.Request, who: Identity) -> web.StreamResponse:
        """`iris job bug-report` in team mode: it holds the job's log tails, so it is its owner's or an admin's."""
        from iris.client.bug_report import report

        job_id = request.query["job_id"]
        await self.require(who, Action.LOGS, job_id)
        return answer(await report(self.iris, job_id, team_mode=True))

    async def kill(self, request: web.Request, who: Identity) -> web.StreamResponse:
        body = await request.json()
        job_id = body["job_id"]
        await self.require(who, Action.KILL, job_id)
        killed = await self.iris.terminate(job_id, reason=f"killed by {who.name}")
        self.gate.audit(who, "kill", job_id)
        return web.json_response({"killed": killed})

    async def logs(self, request: web.Request, who: Identity) -> web.StreamResponse:
        """One call of the log store's reading interface (worker_agent.object_store.Logs) for one task."""
        body = await request.json()
        job_id, index, op = body["job_id"], int(body["task_index"]), body["op"]
        await self.require(who, Action.LOGS, job_id)
        logs = self.iris.logs
        cursor = LogCursor(tuple((int(a), int(o)) for a, o in body.get("cursor") or ()))
        match op:
            case "read_lines":
                result: Any = await asyncio.to_thread(logs.read_lines, job_id, index)
            case "read_bytes":
                result = await asyncio.to_thread(logs.read_bytes, job_id, index)
            case "read_new":
                result = await asyncio.to_thread(logs.read_new, job_id, index, cursor)
            case "read_new_bytes":
                result = await asyncio.to_thread(logs.read_new_bytes, job_id, index, cursor,
                                                 final=bool(body.get("final")))  # fmt: skip
            case "cursor_since":
                result = await asyncio.to_thread(logs.cursor_since, job_id, index, float(body["since"]))
            case _:
                raise ValueError(f"op: unknown log operation {op!r}")
        return answer(result)

    async def task_access(self, request: web.Request, who: Identity) -> web.StreamResponse:
        """`iris task exec` / `profile` on the owner's behalf: run it to the end, then answer with all its output."""
        body = await request.json()
        job_id, index = body["job_id"], int(body["task_index"])
        profile = body.get("activity") == PROFILE_TASK
        if not isinstance(job_id, str) or not job_id:
            raise ValueError("job_id: missing")
        self.authorized(who, Action.EXEC, "profile" if profile else "exec", job_id, owner=await self.owner(job_id))
        status = await self.iris.status(job_id)
        task = next((t for t in status.tasks if t.task_index == index), None)
        if status.state != JobState.RUNNING or task is None or task.state != TaskState.RUNNING or not task.worker_id:
            raise ValueError(f"task {index} of job {job_id} is not running")
        inp = TaskAccessInput(activity=PROFILE_TASK if profile else EXEC_IN_TASK, access_id=uuid.uuid4().hex,
                              job_id=job_id, task_index=index, worker_id=task.worker_id,
                              argv=[str(a) for a in body.get("argv", ())],
                              duration_seconds=float(body.get("duration", 0.0)))  # fmt: skip
        self.gate.audit(who, "profile" if profile else "exec", job_id, " ".join(inp.argv)[:200])
        handle = await start_access(self.iris.temporal, inp)
        result = await handle.result()
        logs = open_log_store(task_access_log_url(self.iris.store_url))
        try:
            output, _ = await asyncio.to_thread(logs.read_new_bytes, inp.access_id, 0, LogCursor(), final=True)
        except (OSError, ValueError):
            output = b""
        svg = b""
        if profile and result.exit_code == 0:
            svg = await asyncio.to_thread(self.iris.blobs.get, profile_blob_key(inp.access_id))
        return answer({"exit_code": result.exit_code, "error": result.error, "output": output, "svg": svg})

    # -- the cluster

    async def cluster_read(self, request: web.Request, who: Identity) -> web.StreamResponse:
        authorize(who, Action.READ)
        what = request.match_info["what"]
        reads: dict[str, Callable[[], Awaitable[Any]]] = {
            "workers": self.iris.list_workers, "users": self.iris.list_users,
            "user": lambda: self.iris.user_status(request.query.get("user", "")),
            "reservations": self.iris.list_reservations,
            "slices": lambda: self.iris.list_slices(request.query.get("include_ended") == "1"),
            "summary": lambda: self.iris.summary(float(request.query.get("budget", "3"))),
            "teams": self.iris.list_teams, "queue": self.iris.queue, "autoscaler": self.iris.autoscaler_status,
        }  # fmt: skip
        if what not in reads:
            raise KeyError(f"no such read: {what}")
        return answer(await reads[what]())

    async def set_credits(self, request: web.Request, who: Identity) -> web.StreamResponse:
        body = await request.json()
        try:
            authorize(who, Action.CREDITS)
        except PermissionDeniedError as err:
            err.audited = True
            self.gate.audit(who, "credits", str(body.get("user")), "refused", allowed=False)
            raise
        await self.iris.set_credits(resolve_user(body["user"]), float(body["amount"]))
        self.gate.audit(who, "credits", body["user"], f"{float(body['amount']):g}")
        return web.json_response({"ok": True})

    async def fleet(self, request: web.Request, who: Identity) -> web.StreamResponse:
        what = request.match_info["what"]
        body = await request.json()
        subject = str(body.get("worker_id") or body.get("slice_id") or "")
        self.authorized(who, Action.FLEET, what, subject)
        self.gate.audit(who, what, subject)
        if what == "cordon":
            await fleet_view.cordon_worker(self.iris.temporal, body["worker_id"], bool(body.get("cordoned", True)))
            return answer(None)
        if what == "drain":
            timeout = body.get("timeout")
            return answer(await self.iris.drain_worker(body["worker_id"], None if timeout is None else float(timeout)))
        if what == "terminate-slice":
            return answer(await fleet_view.terminate_slice(self.iris.temporal, body["slice_id"],
                                                      float(body.get("drain_timeout", 0.0))))  # fmt: skip
        raise KeyError(f"no such fleet action: {what}")

    # -- users and the audit log

    async def add_user(self, request: web.Request, who: Identity) -> web.StreamResponse:
        body = await request.json()
        self.authorized(who, Action.USERS, "add-user", str(body.get("name", "")))
        name, role = resolve_user(body["name"]), Role(body.get("role", Role.USER))
        token = await store.add_user(self.iris.temporal, name, role.value, by=who.name)
        await self.gate.directory.refresh(older_than=0.0)
        return web.json_response({"token": token})

    async def revoke(self, request: web.Request, who: Identity) -> web.StreamResponse:
        body = await request.json()
        self.authorized(who, Action.USERS, "revoke", str(body.get("name", "")))
        name = resolve_user(body["name"])
        # With OIDC, an SSO user Iris never issued a token to can be revoked too (their sign-ins are refused).
        await store.revoke_user(self.iris.temporal, name, by=who.name, unknown_ok=self.gate.oidc is not None)
        self.gate.directory.forget(name)
        # Their schedules would go on starting jobs as them: paused (an admin may unpause or delete them).
        for owned in await schedule_calls.list_all(self.iris):
            if owned.user == name and not owned.paused:
                await schedules.AsyncSchedule(self.iris, owned.name).pause(f"paused: its owner {name} was revoked")
                self.gate.audit(who, "schedule pause", owned.name, f"its owner {name} was revoked")
        return web.json_response({"ok": True})

    async def audit(self, request: web.Request, who: Identity) -> web.StreamResponse:
        authorize(who, Action.USERS)
        await self.gate.directory.flush()
        since = float(request.query.get("since", "0") or 0)
        return answer(await store.read_audit(self.iris.temporal, since))


def may(who: Identity | None, action: Action, owner: str) -> bool:
    """For templates: whether the viewer may take `action` on a job of `owner` (no login: yes)."""
    return who is None or decide(who, action, job_id="-", owner=owner).allowed


__all__ = ["COOKIE", "PREFIX", "Gate", "IrisApi", "bearer", "may"]
