"""The Temporal UI in team mode: behind the dashboard's login, for admins only.

The UI shows every workflow's inputs, results and history and can signal, cancel, reset and
terminate any of them, so in team mode nobody reaches it but through the dashboard: the UI runs
with a public path (`--ui-public-path /temporal` on the local cluster's dev server) on an address only
the controller uses, and the dashboard serves that path, checks the viewer's credential like every
page, and passes the request on for admins alone.
Reads are refused to users too, not only writes: the UI would show them other users' inputs and
results, which the Iris API gives only to the job's owner. The viewer's Iris credential (the login
cookie, a bearer token) is not passed on; the UI's own cookies (its CSRF token) are.
"""

from __future__ import annotations

from http.cookies import SimpleCookie
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from iris.auth.api import COOKIE
from iris.auth.rules import Role
from iris.dashboard.login import viewer

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length",
})  # fmt: skip
NOT_PASSED = frozenset({"authorization", "cookie"})  # the viewer's Iris credential; the UI's own cookies go again
SESSION_KEY = web.AppKey("temporal_ui_session", aiohttp.ClientSession)
REFUSED = "the Temporal UI is for admins: it shows every job's inputs and results and can change any workflow"


def served_path(ui_url: str) -> str:
    """The UI's public path (`http://10.0.0.5:8080/temporal` -> `/temporal`): where the dashboard serves it;
    "" for a UI at the root of its address, which the dashboard cannot serve beside its own pages."""
    return urlsplit(ui_url).path.rstrip("/")


def add_routes(app: web.Application, ui_url: str) -> None:
    """Serve the UI at `ui_url` under its public path (`served_path`), to admins."""
    parts = urlsplit(ui_url)
    prefix = served_path(ui_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or not prefix:
        raise ValueError(f"temporal_ui_url must be an http(s):// URL with the UI's public path, got {ui_url!r}")
    origin = f"{parts.scheme}://{parts.netloc}"

    async def open_session(app: web.Application) -> None:
        app[SESSION_KEY] = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=60), auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar()
        )

    async def close_session(app: web.Application) -> None:
        await app[SESSION_KEY].close()

    async def proxy(request: web.Request) -> web.StreamResponse:
        who = viewer(request)
        if who is None or who.role != Role.ADMIN:
            return web.Response(text=REFUSED, status=403)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP | NOT_PASSED}
        cookies = SimpleCookie(request.headers.get("Cookie", ""))
        kept = "; ".join(f"{name}={morsel.value}" for name, morsel in cookies.items() if name != COOKIE)
        if kept:
            headers["Cookie"] = kept
        session = request.app[SESSION_KEY]
        try:
            async with session.request(request.method, origin + request.path_qs, headers=headers,
                                       data=await request.read(), allow_redirects=False) as upstream:  # fmt: skip
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for name, value in upstream.headers.items():
                    if name.lower() not in HOP_BY_HOP:
                        response.headers.add(name, value)
                await response.prepare(request)
                async for chunk in upstream.content.iter_chunked(64 * 1024):
                    await response.write(chunk)
                await response.write_eof()
                return response
        except (aiohttp.ClientError, TimeoutError) as err:
            return web.Response(text=f"the Temporal UI at {origin} does not answer: {err}", status=502)

    app.on_startup.append(open_session)
    app.on_cleanup.append(close_session)
    app.router.add_route("*", prefix, proxy)
    app.router.add_route("*", prefix + "/{tail:.*}", proxy)


__all__ = ["add_routes", "served_path"]
