"""The dashboard in team mode: nothing without a credential, a login page, and the one write it offers (kill).

A browser without a credential gets the login page (401); it posts a token, which is checked and
set as an HttpOnly, SameSite=Strict cookie, or, with an OIDC issuer configured, signs in there
(iris/dashboard/oidc_login.py), which sets the same cookie. Anything else (scripts, the API) sends
`Authorization: Bearer TOKEN`. The viewer's identity rides on the request, so a page shows the
kill button only where the viewer may use it, and the kill itself is checked again on the server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from html import escape
from typing import Any

import structlog
from aiohttp import web

from iris.auth import store
from iris.auth.api import COOKIE, PREFIX, Gate, IrisApi
from iris.auth.errors import AuthenticationError, PermissionDeniedError
from iris.auth.rules import Action, Identity, Role, decide
from iris.dashboard.oidc_login import START_PATH, OidcLogin

log = structlog.get_logger("iris.dashboard")

VIEWER = web.RequestKey("iris_viewer", Identity)
OPEN_PATHS = ("/login", "/static/")
COOKIE_SECONDS = 12 * 3600

_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in · Iris</title>
<link rel="stylesheet" href="/static/dashboard.css"></head><body><main id="content">
<h1>Iris</h1><p>This cluster runs in team mode. Paste your token (<code>iris auth add-user</code> printed it).</p>
{error}<form method="post" action="/login"><input type="password" name="token" autocomplete="off" autofocus
aria-label="token"><input type="hidden" name="next" value="{next}"> <button type="submit">Sign in</button></form>{oidc}
</main></body></html>"""
_OIDC = '<p>or <a href="{start}" id="oidc-login">sign in at {issuer}</a></p>'


def after_login(path: str) -> str:
    """Where a sign-in goes on to: the page that asked for it, if it is one of this dashboard's (a path, not
    another site's address: `//host` or `/\\host` would leave it), else the queue."""
    if path.startswith("/") and not path.startswith(("//", "/\\")) and not path.startswith("/login"):
        return path
    return "/queue"


def login_page(error: str = "", status: int = 401, issuer: str = "", next_path: str = "/queue") -> web.Response:
    """The sign-in page; with `issuer`, it also offers signing in there (OIDC). Signed in, the browser goes
    on to `next_path` (the page it asked for)."""
    shown = f'<p class="error">{escape(error)}</p>' if error else ""
    oidc = _OIDC.format(start=START_PATH, issuer=escape(issuer)) if issuer else ""
    text = _PAGE.format(error=shown, oidc=oidc, next=escape(after_login(next_path)))
    response = web.Response(text=text, status=status, content_type="text/html")
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="iris"'
    return response


def viewer(request: web.Request) -> Identity | None:
    """Who is looking (None without team mode)."""
    return request.get(VIEWER)


def oidc_issuer(gate: Gate) -> str:
    """The issuer the dashboard signs users in at ("" when it offers only tokens: no OIDC audience to be)."""
    return gate.oidc.issuer if gate.oidc is not None and gate.oidc.audience else ""


def guard(gate: Gate) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Middleware: every page and API call needs a verified credential (the API checks its own)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                         ) -> web.StreamResponse:  # fmt: skip
        if request.path.startswith(OPEN_PATHS) or request.path.startswith(PREFIX + "/"):
            return await handler(request)
        try:
            request[VIEWER] = await gate.identify(request)
        except AuthenticationError as err:
            if request.headers.get("Authorization") or "text/html" not in request.headers.get("Accept", "text/html"):
                return web.json_response({"error": "authentication", "message": str(err)}, status=401,
                                         headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
            return login_page(str(err) if request.cookies.get(COOKIE) else "", issuer=oidc_issuer(gate),
                              next_path=request.path_qs)  # fmt: skip
        decision = decide(request[VIEWER], Action.READ)  # a worker credential serves as an agent, nothing else
        if not decision.allowed:
            gate.audit(request[VIEWER], "read", request.path, "refused: dashboard", allowed=False)
            return web.json_response({"error": "permission", "message": decision.reason}, status=403)
        return await handler(request)

    return middleware


def pages(base: tuple[str, ...], who: Identity | None) -> tuple[str, ...]:
    """The navigation: the audit log is an admin's page."""
    return (*base, "audit") if who is not None and who.role == Role.ADMIN else base


async def audit_page(gate: Gate | None, request: web.Request) -> dict[str, Any]:
    who = viewer(request)
    if gate is None or who is None or who.role != Role.ADMIN:
        return {"template": "missing.html", "page": "audit", "title": "Admins only", "status": 403,
                "what": "audit log you may read"}  # fmt: skip
    await gate.directory.flush()
    entries = await store.read_audit(gate.directory.client, limit=500)
    return {"template": "audit.html", "page": "audit", "title": "Audit log", "entries": entries}


def add_routes(app: web.Application, gate: Gate, api: IrisApi) -> None:
    issuer = oidc_issuer(gate)

    def page(error: str = "", status: int = 401) -> web.Response:
        return login_page(error, status, issuer)

    if issuer and gate.oidc is not None:
        OidcLogin(gate.oidc, gate.oidc_client_secret).add_routes(app, page)

    async def show(_: web.Request) -> web.Response:
        return page(status=200)

    async def sign_in(request: web.Request) -> web.Response:
        form = await request.post()
        token, next_path = str(form.get("token", "")).strip(), str(form.get("next", "/queue"))
        try:
            who = await gate.verifiers.identify(token)
        except AuthenticationError as err:
            return login_page(str(err), 401, issuer, next_path)
        response = web.HTTPFound(after_login(next_path))
        response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", max_age=COOKIE_SECONDS,
                            secure=request.secure)  # fmt: skip
        log.info("dashboard_login", user=who.name, role=who.role.value)
        raise response

    async def sign_out(_: web.Request) -> web.Response:
        response = web.HTTPFound("/login")
        response.del_cookie(COOKIE)
        raise response

    async def kill(request: web.Request) -> web.Response:
        """The kill button: the same check as the API's (owner or admin), then back to the job's page."""
        who = viewer(request)
        job_id = request.match_info["job_id"]
        if who is None:
            return page()
        try:
            await api.require(who, Action.KILL, job_id)
        except PermissionDeniedError as err:
            return web.Response(text=str(err), status=403)
        except KeyError:
            return web.Response(text=f"no such job: {job_id}", status=404)
        await api.iris.terminate(job_id, reason=f"killed by {who.name}")
        gate.audit(who, "kill", job_id, "dashboard")
        raise web.HTTPSeeOther(f"/jobs/{job_id}")

    app.router.add_get("/login", show)
    app.router.add_post("/login", sign_in)
    app.router.add_post("/logout", sign_out)
    app.router.add_post("/kill/{job_id:.+}", kill)


__all__ = ["add_routes", "guard", "login_page", "viewer"]
