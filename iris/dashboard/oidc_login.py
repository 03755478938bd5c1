"""Signing in to the dashboard through the cluster's OIDC issuer: the authorization code flow with PKCE.

`/login/oidc` sends the browser to the issuer's authorization endpoint (found in its discovery
document) with a fresh `state`, `nonce` and PKCE challenge, kept meanwhile in a short-lived HttpOnly
cookie (so the callback may reach any controller). `/login/oidc/callback` checks the `state`,
exchanges the code at the token endpoint with the PKCE verifier, checks the ID token (signature
against the issuer's keys, issuer, audience, expiry, the `nonce`) and keeps it as the dashboard's
login cookie, which every request then verifies as any bearer credential (iris/auth/verify.py). The
dashboard is the OIDC client `auth.oidc.audience`, so the ID token it gets carries that audience.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import quote_plus, urlencode

import aiohttp
import structlog
from aiohttp import web

from iris.auth.api import COOKIE
from iris.auth.errors import AuthenticationError
from iris.auth.verify import OidcVerifier

log = structlog.get_logger("iris.dashboard")

FLOW_COOKIE = "iris_oidc_flow"
FLOW_SECONDS = 600  # how long a sign-in may take at the issuer
START_PATH = "/login/oidc"
CALLBACK_PATH = "/login/oidc/callback"
TIMEOUT = aiohttp.ClientTimeout(total=15)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass
class OidcLogin:
    """The dashboard as an OIDC client of the verifier's issuer, named its audience (confidential with a secret)."""

    verifier: OidcVerifier
    client_secret: str | None = None
    _endpoints: dict[str, str] = field(default_factory=dict)

    @property
    def issuer(self) -> str:
        return self.verifier.issuer

    @property
    def client_id(self) -> str:
        assert self.verifier.audience, "the dashboard signs in as the OIDC client `audience`"
        return self.verifier.audience

    async def endpoints(self) -> dict[str, str]:
        """The issuer's authorization and token endpoints, from its discovery document (read once)."""
        if not self._endpoints:
            url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
            async with aiohttp.ClientSession(timeout=TIMEOUT) as session, session.get(url) as response:
                response.raise_for_status()
                found = await response.json(content_type=None)
            missing = [k for k in ("authorization_endpoint", "token_endpoint") if not found.get(k)]
            if missing:
                raise ValueError(f"{url} names no {' or '.join(missing)}")
            self._endpoints = {k: str(found[k]) for k in ("authorization_endpoint", "token_endpoint")}
        return self._endpoints

    def add_routes(self, app: web.Application, page: Any) -> None:
        """`page(error, status)` is the login page (iris/dashboard/login.py) a failed sign-in shows."""

        async def start(request: web.Request) -> web.StreamResponse:
            return await self._start(request, page)

        async def callback(request: web.Request) -> web.StreamResponse:
            return await self._callback(request, page)

        app.router.add_get(START_PATH, start)
        app.router.add_get(CALLBACK_PATH, callback)

    async def _start(self, request: web.Request, page: Any) -> web.StreamResponse:
        try:
            authorize = (await self.endpoints())["authorization_endpoint"]
        except (TimeoutError, aiohttp.ClientError, ValueError) as err:
            return page(f"cannot reach the sign-in service at {self.issuer}: {err}", 502)
        state, nonce, verifier = secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48)
        query = urlencode({
            "response_type": "code", "client_id": self.client_id, "redirect_uri": _callback_url(request),
            "scope": "openid profile email", "state": state, "nonce": nonce,
            "code_challenge": _b64(hashlib.sha256(verifier.encode()).digest()), "code_challenge_method": "S256",
        })  # fmt: skip
        response = web.HTTPFound(f"{authorize}{'&' if '?' in authorize else '?'}{query}")
        # Lax, not Strict: the issuer's redirect back is a navigation from another site.
        response.set_cookie(FLOW_COOKIE, f"{state}.{nonce}.{verifier}", httponly=True, samesite="Lax",
                            max_age=FLOW_SECONDS, path=CALLBACK_PATH, secure=request.secure)  # fmt: skip
        raise response

    async def _callback(self, request: web.Request, page: Any) -> web.StreamResponse:
        query = request.query
        if query.get("error"):
            return page(f"the sign-in service refused: {query.get('error_description') or query['error']}", 401)
        state, _, rest = request.cookies.get(FLOW_COOKIE, "").partition(".")
        nonce, _, verifier = rest.partition(".")
        if not state or not secrets.compare_digest(state, query.get("state", "")):
            return page("sign-in expired or was not started here: try again", 401)
        try:
            token = await self._exchange(query.get("code", ""), verifier, _callback_url(request))
            claims = await self.verifier.verified_claims(token)
            if not nonce or claims.get("nonce") != nonce:
                raise AuthenticationError("ID token refused: its nonce is not this sign-in's")
            who = await self.verifier.identity(claims)
        except AuthenticationError as err:
            return page(str(err), 401)
        except (TimeoutError, aiohttp.ClientError, ValueError) as err:
            return page(f"cannot finish signing in at {self.issuer}: {err}", 502)
        expires = int(claims.get("exp", 0)) - int(time.time())
        # A page, not a redirect: a SameSite=Strict cookie set in a navigation another site started is
        # not sent on the redirects of that navigation, so the browser moves on by itself from here.
        response = web.Response(text=_DONE.format(name=escape(who.name)), content_type="text/html")
        response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", max_age=max(60, expires),
                            secure=request.secure)  # fmt: skip
        response.del_cookie(FLOW_COOKIE, path=CALLBACK_PATH)
        log.info("dashboard_login", user=who.name, role=who.role.value, via="oidc")
        return response

    async def _exchange(self, code: str, verifier: str, redirect_uri: str) -> str:
        """The ID token the issuer gives for `code` (AuthenticationError when it gives none)."""
        if not code:
            raise AuthenticationError("the sign-in service sent no code back")
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                "client_id": self.client_id, "code_verifier": verifier}  # fmt: skip
        headers = {}
        if self.client_secret:  # client_secret_basic (RFC 6749 2.3.1: each part form-encoded first)
            pair = f"{quote_plus(self.client_id)}:{quote_plus(self.client_secret)}"
            headers["Authorization"] = f"Basic {base64.b64encode(pair.encode()).decode()}"
        token_url = (await self.endpoints())["token_endpoint"]
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session, session.post(
            token_url, data=form, headers=headers
        ) as response:
            answer = await response.json(content_type=None)
        if response.status != 200 or not isinstance(answer, dict) or not answer.get("id_token"):
            why = answer.get("error_description") or answer.get("error") if isinstance(answer, dict) else None
            raise AuthenticationError(f"the sign-in service gave no ID token: {why or f'HTTP {response.status}'}")
        return str(answer["id_token"])


def _callback_url(request: web.Request) -> str:
    """Where the issuer sends the browser back: this dashboard as the browser sees it (behind a TLS proxy that
    says so in X-Forwarded-Proto / -Host; a false one only names a redirect URI the issuer does not know)."""
    scheme = request.headers.get("X-Forwarded-Proto", request.scheme).split(",")[0].strip()
    host = request.headers.get("X-Forwarded-Host", request.host).split(",")[0].strip()
    return f"{scheme}://{host}{CALLBACK_PATH}"


_DONE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Signed in · Iris</title>
<meta http-equiv="refresh" content="0;url=/queue"><link rel="stylesheet" href="/static/dashboard.css"></head>
<body><main id="content"><p>Signed in as {name}. <a href="/queue">Continue to the queue</a>.</p></main></body></html>"""


__all__ = ["CALLBACK_PATH", "START_PATH", "OidcLogin"]
