"""Schedules in team mode: the Iris API's routes for them (the client's handle is iris/auth/remote.py's).

A user creates a schedule as themselves (its jobs are theirs, as the jobs they submit); everyone may
list schedules, read one and list its jobs; pausing, unpausing, triggering or deleting one is its
owner's (the user who created it) or an admin's, as killing a job is. The controller then makes the
Temporal calls itself (iris/client/schedules.py), as for every other call of the API (iris/auth/api.py).
"""

from __future__ import annotations

import base64
from typing import Any, Protocol

from aiohttp import web

from activities.proto import cluster_pb2 as pb
from iris.auth.rules import Action, Identity, authorize
from iris.auth.wire import Handler, answer
from iris.client import schedule_calls, schedules


class Api(Protocol):
    """What the routes use of the Iris API (iris/auth/api.py `IrisApi`): its client, gate and user check."""

    iris: Any  # the controller's AsyncIrisClient
    gate: Any  # the API's Gate: `audit(...)`

    def verified_request(self, who: Identity, body: dict[str, Any], action: str) -> pb.JobRequest: ...

    def authorized(self, who: Identity, action: Action, label: str, subject: str, *, owner: str | None = None) -> None:
        ...

READS = frozenset({"status", "jobs"})
CHANGES = frozenset({"pause", "unpause", "trigger", "delete"})


class ScheduleRoutes:
    """POST /schedules (create), GET /schedules (list), POST /schedule/{op} (status, jobs, pause, unpause,
    trigger, delete) with the schedule's `name` in the body."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def routes(self) -> list[tuple[str, str, Handler]]:
        return [("POST", "/schedules", self.create), ("GET", "/schedules", self.list),
                ("POST", "/schedule/{op}", self.act)]  # fmt: skip

    async def create(self, request: web.Request, who: Identity) -> web.StreamResponse:
        body = await request.json()
        req = self.api.verified_request(who, body, "create_schedule")
        payload = base64.b64decode(body["payload"]) if body.get("payload") else None
        await schedules.start(self.api.iris, req, payload, cron=body["cron"], timezone=body["timezone"],
                              overlap=body["overlap"])  # fmt: skip
        self.api.gate.audit(who, "schedule create", req.schedule, body["cron"])
        return web.json_response({"name": req.schedule})

    async def list(self, request: web.Request, who: Identity) -> web.StreamResponse:
        authorize(who, Action.READ)
        return answer(await schedule_calls.list_all(self.api.iris))

    async def act(self, request: web.Request, who: Identity) -> web.StreamResponse:
        op = request.match_info["op"]
        body = await request.json()
        name = str(body.get("name") or "")
        schedule = schedules.AsyncSchedule(self.api.iris, name)
        if op in READS:
            authorize(who, Action.READ)
            return answer(await (schedule.status() if op == "status" else schedule.job_ids()))
        if op not in CHANGES:
            raise KeyError(f"no such schedule action: {op}")
        self.api.authorized(who, Action.SCHEDULE, f"schedule {op}", name, owner=(await schedule.status()).user)
        if op == "pause":
            await schedule.pause(str(body.get("note") or "paused"))
        elif op == "unpause":
            await schedule.unpause(str(body.get("note") or "unpaused"))
        elif op == "trigger":
            await schedule.trigger()
        else:
            await schedule.delete()
        self.api.gate.audit(who, f"schedule {op}", name)
        return answer(None)
