"""The client's side of team mode: `AsyncIrisClient`'s methods, each one call to the Iris API.

`IrisClient.connect(..., token=)` (or IRIS_TOKEN / IRIS_TOKEN_FILE, or a local cluster in team mode)
returns a client built on `RemoteIrisClient`: it holds the user's Iris token and the API's URL, and
nothing that opens Temporal. Requests are built and validated here (a bad option is still a
ValueError naming the field, before anything is sent); the controller sets the job's user to the
verified identity. The API's errors come back as the same exceptions (iris/auth/api.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

from activities.contracts.fleet import ControlPlaneAddress
from iris.auth.connect import TOKEN_ENV as TOKEN_ENV
from iris.auth.connect import resolve_token as resolve_token
from iris.auth.errors import AuthenticationError, PermissionDeniedError
from iris.client.code_shipping import NotPlainDataError, unpickle_plain, unpickle_result
from iris.client.job_control import IfExists
from iris.client.submission import prepare_submission, resolve_user
from iris.types import JobFailedError, JobStatus, UserStatus, WorkerStatus
from worker_agent.storage import LogCursor
from worker_agent.task_token import TOKEN_FILE_ENV

PREFIX = "/api/v1"


def error_for(status: int, body: dict[str, Any]) -> Exception:
    """The exception the API's error answer stands for (iris/auth/api.py `refusal`)."""
    message = str(body.get("message") or f"HTTP {status}")
    match status:
        case 401:
            return AuthenticationError(message)
        case 403:
            return PermissionDeniedError(message, action=body.get("action", ""), job_id=body.get("job_id", ""),
                                         owner=body.get("owner", ""))  # fmt: skip
        case 404:
            return KeyError(message)
        case 400:
            return ValueError(message)
        case 409:
            status_: JobStatus = pickle.loads(base64.b64decode(body["status"]))
            return JobFailedError(status_, message)
        case 504:
            return TimeoutError(message)
    return RuntimeError(f"Iris API: {message}")


def blocking_call(api: str, url: str, token: str | None, data: bytes | None = None) -> bytes:
    """One blocking request to the Iris API at `api` (POST when there is `data`); its errors as exceptions."""
    import json
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as err:
        try:
            answer = json.loads(err.read() or b"{}")
        except ValueError:
            answer = {}
        raise error_for(err.code, answer) from None
    except urllib.error.URLError as err:
        raise ConnectionError(f"cannot reach the Iris API at {api}: {err.reason}") from None


def enroll_agent(api: str, token: str | None, worker_id: str) -> ControlPlaneAddress:
    """Where an agent with a worker credential serves: what the API's controller tells the agents it starts.

    Its tasks reach the API they enrolled through unless the controller names another (`IRIS_TASK_API`).
    """
    import json
    import urllib.parse

    if token is None:
        raise AuthenticationError(
            f"worker serve through the Iris API at {api} needs a worker credential in IRIS_TOKEN or "
            "IRIS_TOKEN_FILE (`iris auth add-user NAME --worker` prints one)"
        )
    query = urllib.parse.urlencode({"worker_id": worker_id})
    body = json.loads(blocking_call(api, f"{api.rstrip('/')}{PREFIX}/agent/enroll?{query}", token))
    env = {str(k): str(v) for k, v in body.get("env", {}).items()}
    env.setdefault("IRIS_TASK_API", api.rstrip("/"))
    return ControlPlaneAddress(temporal_address=body["temporal_address"], namespace=body["namespace"],
                               store_url=body["store_url"], extra_env=env)  # fmt: skip


class RemoteLogs:
    """The log store's reading interface, each read checked by the API (the owner's and admins' only).

    Blocking HTTP on purpose: a log follower reads from inside progress callbacks that already run
    on the client's event loop.
    """

    def __init__(self, client: RemoteIrisClient) -> None:
        self.client = client

    @property
    def url(self) -> str:
        return self.client.url + PREFIX + "/job/logs"

    def _call(self, op: str, job_id: str, task_index: int, **extra: Any) -> Any:
        import json

        if isinstance(extra.get("cursor"), LogCursor):
            extra["cursor"] = [list(pair) for pair in extra["cursor"].offsets]
        data = json.dumps({"op": op, "job_id": job_id, "task_index": task_index, **extra}).encode()
        return pickle.loads(blocking_call(self.client.url, self.url, self.client._token, data))

    def read_lines(self, job_id: str, task_index: int) -> list[str]:
        result: list[str] = self._call("read_lines", job_id, task_index)
        return result

    def read_bytes(self, job_id: str, task_index: int) -> bytes:
        result: bytes = self._call("read_bytes", job_id, task_index)
        return result

    def read_new(self, job_id: str, task_index: int, cursor: LogCursor | None) -> tuple[list[str], LogCursor]:
        result: tuple[list[str], LogCursor] = self._call("read_new", job_id, task_index, cursor=cursor or LogCursor())
        return result

    def read_new_bytes(self, job_id: str, task_index: int, cursor: LogCursor | None,
                       final: bool = False) -> tuple[bytes, LogCursor]:  # fmt: skip
        result: tuple[bytes, LogCursor] = self._call("read_new_bytes", job_id, task_index,
                                                     cursor=cursor or LogCursor(), final=final)  # fmt: skip
        return result

    def cursor_since(self, job_id: str, task_index: int, since: float) -> LogCursor:
        result: LogCursor = self._call("cursor_since", job_id, task_index, since=since)
        return result


class RemoteIrisClient:
    """What `IrisClient` calls on its async client, through the Iris API with a bearer token."""

    remote = True

    def __init__(self, url: str, token: str, session: aiohttp.ClientSession, user: str = "") -> None:
        self.url = url.rstrip("/")
        self._token = token
        self.session = session
        self.user = user  # the verified name (whoami)
        self.role = ""
        self.named_user: str | None = None  # `connect(user=...)` / IRIS_USER: checked by the API at submit
        self.logs = RemoteLogs(self)
        self.store_url = ""

    @property
    def temporal(self) -> Any:
        """There is none: team mode gives users no Temporal connection (what needs one is refused in one line)."""
        raise RuntimeError("this needs a Temporal connection, which team mode does not give users; "
                           "ask an admin to run it where the controller's credentials are")  # fmt: skip

    @classmethod
    async def connect(cls, url: str, token: str | None, user: str | None = None) -> RemoteIrisClient:
        """Reach the API at `url` and learn who `token` is; AuthenticationError if it is missing or refused. Without a
        token, what answers at `url` decides the error (`_without_token`): not every http(s) address is an Iris API."""
        if user is not None:
            resolve_user(user)
        if token is None:
            raise await _without_token(url)
        session = aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"},
                                        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))  # fmt: skip
        client = cls(url, token, session)
        try:
            me = await client.get("/whoami")
        except BaseException:
            await session.close()
            raise
        client.user, client.role = me["name"], me["role"]
        client.named_user = user if user is not None else (os.environ.get("IRIS_USER") or None)
        return client

    async def close(self) -> None:
        await self.session.close()

    # -- the wire

    async def _answer(self, response: aiohttp.ClientResponse) -> Any:
        if response.status == 202:
            return None
        if response.status < 400:
            if response.content_type == "application/json":
                return await response.json()
            return pickle.loads(await response.read())
        try:
            body = await response.json()
        except (aiohttp.ContentTypeError, ValueError):
            body = {"message": (await response.text())[:200]}
        raise error_for(response.status, body)

    async def get(self, path: str, **params: Any) -> Any:
        query = {k: str(v) for k, v in params.items() if v is not None}
        try:
            async with self.session.get(self.url + PREFIX + path, params=query) as response:
                return await self._answer(response)
        except aiohttp.ClientConnectionError as err:
            raise ConnectionError(f"cannot reach the Iris API at {self.url}: {err}") from None

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            async with self.session.post(self.url + PREFIX + path, json=body) as response:
                return await self._answer(response)
        except aiohttp.ClientConnectionError as err:
            raise ConnectionError(f"cannot reach the Iris API at {self.url}: {err}") from None

    # -- submission

    async def submit(self, fn: Callable[..., Any], *args: Any, kwargs: dict[str, Any] | None = None,
                     **options: Any) -> str:  # fmt: skip
        job = prepare_submission(options, fn=fn, args=args, kwargs=kwargs)  # checked here, as locally
        return await self._submit(job.request, job.payload, job.bundle, job.given, job.if_exists)

    async def submit_command(self, command: Sequence[str], **options: Any) -> str:
        job = prepare_submission(options, command=command)
        return await self._submit(job.request, None, job.bundle, job.given, job.if_exists)

    # -- schedules (iris/auth/schedule_api.py)

    async def create_schedule(self, req: Any, payload: bytes | None, *, cron: str, timezone: str, overlap: str) -> None:
        body = {
            "request": base64.b64encode(req.SerializeToString()).decode(),
            "payload": base64.b64encode(payload).decode() if payload is not None else None,
            "user": self.named_user, "cron": cron, "timezone": timezone, "overlap": overlap,
        }  # fmt: skip
        await self.post("/schedules", body)

    async def list_schedules(self) -> Any:
        return await self.get("/schedules")

    def schedule(self, name: str) -> RemoteSchedule:
        return RemoteSchedule(self, name)

    async def _submit(self, req: Any, payload: bytes | None, bundle: tuple[str, bytes] | None,
                      given: frozenset[str], if_exists: IfExists = IfExists.NEW) -> str:  # fmt: skip
        body = {
            "request": base64.b64encode(req.SerializeToString()).decode(),
            "payload": base64.b64encode(payload).decode() if payload is not None else None,
            "bundle": [bundle[0], base64.b64encode(bundle[1]).decode()] if bundle is not None else None,
            "given": sorted(given), "user": self.named_user, "if_exists": if_exists.value,
        }  # fmt: skip
        job_id: str = (await self.post("/jobs", body))["job_id"]
        return job_id

    # -- jobs

    async def _require_job(self, job_id: str) -> None:
        await self.get("/job/exists", job_id=job_id)

    async def status(self, job_id: str) -> JobStatus:
        result: JobStatus = await self.get("/job/status", job_id=job_id)
        return result

    async def visible_status(self, job_id: str) -> JobStatus:
        result: JobStatus = await self.get("/job/visible", job_id=job_id)
        return result

    async def wait(
        self,
        job_id: str,
        timeout: float | None = None,
        poll: float = 0.5,
        on_progress: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """The job's final status: the API holds each call until it ends or a slice of time passes."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            step = poll if on_progress is not None else 55.0  # the API holds a call at most this long
            step = step if left is None else min(step, left)
            final: JobStatus | None = await self.post("/job/wait", {"job_id": job_id, "timeout": max(step, 0.01)})
            if final is not None:
                if on_progress:
                    on_progress(final)
                return final
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"job {job_id} did not finish within {timeout} s")
            if on_progress:
                on_progress(await self.visible_status(job_id))

    async def results(self, job_id: str, *, partial: bool = False, trust: bool = False) -> list[Any]:
        """Each task's value; another user's job's (an admin reading it) only as plain data, unless `trust`:
        unpickling what their code returned would run their code here, with this caller's token."""
        blobs: list[bytes | None] = await self.get("/job/results", job_id=job_id, partial="1" if partial else "0")
        owner = (await self.visible_status(job_id)).user
        if trust or owner == self.user:
            return [unpickle_result(b) if b is not None else None for b in blobs]
        out = []
        for index, b in enumerate(blobs):
            try:
                out.append(unpickle_plain(b) if b is not None else None)
            except NotPlainDataError as err:
                raise PermissionDeniedError(
                    f"results of job {job_id}: task {index} returned a {err.what}; another user's ({owner}) results "
                    f"are read as plain data only, since unpickling anything else runs their code in this process "
                    f"with your credentials: results(trust=True) reads it if you trust {owner}'s code",
                    action="unpickle", job_id=job_id, owner=owner,
                ) from None
        return out

    async def list_jobs(self, limit: int = 200, *, state: str | None = None, user: str | None = None,
                        name: str | None = None, parent: str | None = None, namespace: str | None = None,
                        under: str | None = None, page_size: int = 200) -> list[JobStatus]:  # fmt: skip
        result: list[JobStatus] = await self.get("/jobs", limit=limit, state=state, user=user, name=name,
                                                 parent=parent, namespace=namespace, under=under)  # fmt: skip
        return result

    async def terminate(self, job_id: str, reason: str = "killed by user") -> bool:
        return bool((await self.post("/job/kill", {"job_id": job_id}))["killed"])

    async def endpoints(self, job_id: str) -> dict[str, dict[int, str]]:
        """Every named port of the job's running tasks (name -> task index -> host:port)."""
        found: dict[str, dict[int, str]] = await self.get("/job/endpoints", job_id=job_id)
        return found

    def fetch_task_logs(self, job_id: str, task_index: int) -> list[str]:
        return self.logs.read_lines(job_id, task_index)

    async def task_access(self, job_id: str, task_index: int, *, argv: Sequence[str] = (), profile: bool = False,
                          duration: float = 0.0) -> dict[str, Any]:  # fmt: skip
        """Run `iris task exec` (or profile) through the API; exit code, error, output (and the SVG)."""
        body = {"job_id": job_id, "task_index": task_index, "argv": list(argv), "duration": duration,
                "activity": "profile_task" if profile else "exec_in_task"}  # fmt: skip
        result: dict[str, Any] = await self.post("/job/access", body)
        return result

    # -- the cluster

    async def list_workers(self) -> list[WorkerStatus]:
        result: list[WorkerStatus] = await self.get("/cluster/workers")
        return result

    async def list_users(self) -> list[UserStatus]:
        result: list[UserStatus] = await self.get("/cluster/users")
        return result

    async def user_status(self, user: str) -> UserStatus | None:
        result: UserStatus | None = await self.get("/cluster/user", user=user)
        return result

    async def list_reservations(self) -> Any:
        return await self.get("/cluster/reservations")

    async def bug_report(self, job_id: str) -> str:
        text: str = await self.get("/job/bug-report", job_id=job_id)
        return text

    async def list_teams(self) -> Any:
        return await self.get("/cluster/teams")

    async def queue(self) -> Any:
        return await self.get("/cluster/queue")

    async def autoscaler_status(self) -> Any:
        return await self.get("/cluster/autoscaler")

    async def list_slices(self, include_ended: bool = False) -> Any:
        return await self.get("/cluster/slices", include_ended="1" if include_ended else "0")

    async def summary(self, budget: float = 3.0) -> Any:
        return await self.get("/cluster/summary", budget=budget)

    async def set_credits(self, user: str, amount: float) -> None:
        await self.post("/credits", {"user": user, "amount": amount})

    async def cordon_worker(self, worker_id: str, cordoned: bool = True) -> None:
        await self.post("/fleet/cordon", {"worker_id": worker_id, "cordoned": cordoned})

    async def drain_worker(self, worker_id: str, timeout: float | None = None, poll: float = 1.0,
                           on_progress: Callable[[WorkerStatus], None] | None = None) -> WorkerStatus:  # fmt: skip
        result: WorkerStatus = await self.post("/fleet/drain", {"worker_id": worker_id, "timeout": timeout})
        return result

    async def terminate_slice(self, slice_id: str, drain_timeout: float = 0.0) -> bool:
        return bool(await self.post("/fleet/terminate-slice", {"slice_id": slice_id, "drain_timeout": drain_timeout}))

    # -- users

    async def whoami(self) -> tuple[str, str]:
        me = await self.get("/whoami")
        return me["name"], me["role"]

    async def add_user(self, name: str, role: str = "user") -> str:
        token: str = (await self.post("/auth/users", {"name": name, "role": role}))["token"]
        return token

    async def revoke_user(self, name: str) -> None:
        await self.post("/auth/revoke", {"name": name})

    async def audit(self, since: float = 0.0) -> list[Any]:
        result: list[Any] = await self.get("/auth/audit", since=since)
        return result


__all__ = ["TOKEN_ENV", "TOKEN_FILE_ENV", "RemoteIrisClient", "RemoteLogs", "resolve_token"]


class RemoteSchedule:
    """`AsyncSchedule`'s calls, through the Iris API (what `IrisClient.schedule(name)` wraps in team mode;
    iris/auth/schedule_api.py serves them)."""

    def __init__(self, client: RemoteIrisClient, name: str) -> None:
        self._client = client
        self.name = name

    async def _call(self, op: str, **extra: Any) -> Any:
        return await self._client.post(f"/schedule/{op}", {"name": self.name, **extra})

    async def status(self) -> Any:
        return await self._call("status")

    async def pause(self, note: str = "paused") -> None:
        await self._call("pause", note=note)

    async def unpause(self, note: str = "unpaused") -> None:
        await self._call("unpause", note=note)

    async def trigger(self) -> None:
        await self._call("trigger")

    async def delete(self) -> None:
        await self._call("delete")

    async def job_ids(self) -> list[str]:
        ids: list[str] = await self._call("jobs")
        return ids


async def _without_token(url: str) -> Exception:
    """Why a connection to `url` without a token fails: a team-mode API asks for one (AuthenticationError); anything
    else that answers there is no Iris API, which no token would open (ValueError): an http(s) address pasted from
    `iris cluster status`'s UI or dashboard line of a cluster not in team mode, or from another server."""
    asked = url.rstrip("/") + PREFIX + "/whoami"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(asked, allow_redirects=False) as response,
        ):
            status, answer = response.status, None
            if response.content_type == "application/json":
                with contextlib.suppress(ValueError):  # not JSON after all: not the API's answer
                    answer = await response.json()
    except (TimeoutError, aiohttp.ClientError) as err:
        return ConnectionError(f"cannot reach the Iris API at {url}: {err or type(err).__name__}")
    if status == 401 and isinstance(answer, dict) and answer.get("error") == "authentication":
        return AuthenticationError(
            f"the cluster at {url} runs in team mode: pass token= to connect(), or set IRIS_TOKEN or IRIS_TOKEN_FILE"
        )
    return ValueError(
        f"{url} is not an Iris API (it answered HTTP {status}): an http(s) address is a team-mode cluster's API; "
        "a cluster not in team mode is reached at its Temporal HOST:PORT (`iris cluster status`, Temporal:)"
    )
