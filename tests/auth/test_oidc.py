"""OIDC/JWT bearer tokens in team mode: checked against the issuer's JWKS, named by their claims, given Iris's role."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
import pytest
from aiohttp import ClientSession, CookieJar, web
from aiohttp.test_utils import TestServer

from iris import AuthenticationError
from iris.auth.rules import Identity, Role
from iris.auth.verify import OidcVerifier, TokenVerifier, Verifiers, oidc_name
from tests.test_codec_server import Issuer


class Roles:
    """The directory as the OIDC verifier asks it: a role by name ("" once revoked, None if unknown)."""

    def __init__(self, roles: dict[str, str]) -> None:
        self.roles = roles

    async def role_of(self, name: str) -> str | None:
        return self.roles.get(name)


async def test_issuer_signed_tokens_name_the_user_with_iris_role() -> None:
    """A token the issuer signed is the user its claims name, with the role Iris holds for that name (else user);
    a revoked name, an expired token or another audience is refused."""
    issuer = Issuer()
    await issuer.start()
    assert issuer.server is not None
    try:
        roles = Roles({"ana": "admin"})  # an Iris-issued admin named ana: the token's bare `sub` is not them
        verifier = OidcVerifier(issuer.url, "iris", roles)  # type: ignore[arg-type]
        chain = Verifiers((TokenVerifier(roles), verifier))  # type: ignore[arg-type]
        name = f"ana@{urlsplit(issuer.url).netloc}"
        assert Identity(name, Role.USER, via="oidc") == await chain.identify(issuer.token(audience="iris"))
        roles.roles[name] = "admin"
        assert Role.ADMIN == (await chain.identify(issuer.token(audience="iris"))).role
        roles.roles[name] = ""
        with pytest.raises(AuthenticationError, match="revoked"):
            await chain.identify(issuer.token(audience="iris"))
        with pytest.raises(AuthenticationError, match=r"(?i)expired"):
            await chain.identify(issuer.token(audience="iris", expires_in=-120))
        with pytest.raises(AuthenticationError, match=r"(?i)audience"):
            await chain.identify(issuer.token(audience="temporal-ui"))
        with pytest.raises(AuthenticationError, match="no credential"):
            await chain.identify(None)
    finally:
        await issuer.server.close()


def test_the_user_a_token_names_is_never_a_bare_name() -> None:
    """The whole verified e-mail address, else sub at the issuer's host: never a name one may pick at the issuer
    (preferred_username, an address's local part), which would make anyone signing in there `admin`."""
    issuer = "https://sso.example.com"
    assert "ana@example.com" == oidc_name({"preferred_username": "admin", "email": "ana@example.com", "sub": "1"},
                                          issuer)  # fmt: skip
    assert "admin@evil.example" == oidc_name({"email": "admin@evil.example", "sub": "2"}, issuer)
    assert "3@sso.example.com" == oidc_name({"email": "ops@example.com", "email_verified": False, "sub": "3"}, issuer)
    assert "a-b@sso.example.com" == oidc_name({"preferred_username": "ops", "sub": "a/b"}, issuer)
    with pytest.raises(AuthenticationError):
        oidc_name({"preferred_username": "admin"}, issuer)


class SignInIssuer(Issuer):
    """The fake issuer, signing users in too, as one whose user is already signed in there would: `/authorize`
    sends the browser straight back with a code; `/token` gives the ID token for it once the PKCE verifier
    matches the challenge. `nonce` overrides the nonce it signs (a replayed token's)."""

    def __init__(self, user: str = "ana") -> None:
        super().__init__()
        self.user = user
        self.nonce: str | None = None
        self.codes: dict[str, dict[str, str]] = {}
        self.secrets_seen: list[str | None] = []

    async def start(self) -> None:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))

        async def discovery(_: web.Request) -> web.Response:
            return web.json_response({"issuer": self.url, "jwks_uri": f"{self.url}/jwks",
                                      "authorization_endpoint": f"{self.url}/authorize",
                                      "token_endpoint": f"{self.url}/token"})  # fmt: skip

        async def jwks(_: web.Request) -> web.Response:
            return web.json_response({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]})

        async def authorize(request: web.Request) -> web.Response:
            q = request.query
            assert ("code", "S256") == (q["response_type"], q["code_challenge_method"]) and "openid" in q["scope"]
            code = secrets.token_urlsafe(16)
            self.codes[code] = dict(q)
            raise web.HTTPFound(f"{q['redirect_uri']}?{urlencode({'code': code, 'state': q['state']})}")

        async def token(request: web.Request) -> web.Response:
            form = await request.post()
            self.secrets_seen.append(request.headers.get("Authorization"))
            asked = self.codes.pop(str(form["code"]), None)
            verifier = str(form.get("code_verifier", ""))
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
            if asked is None or challenge != asked["code_challenge"] or form["redirect_uri"] != asked["redirect_uri"]:
                return web.json_response({"error": "invalid_grant"}, status=400)
            claims = {"iss": self.url, "aud": asked["client_id"], "sub": "u-1", "email": f"{self.user}@example.com",
                      "nonce": self.nonce or asked["nonce"], "exp": int(time.time() + 300)}  # fmt: skip
            signed = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "k1"})
            return web.json_response({"id_token": signed, "access_token": "opaque", "token_type": "Bearer"})

        issuer_app = web.Application()
        issuer_app.router.add_get("/.well-known/openid-configuration", discovery)
        issuer_app.router.add_get("/jwks", jwks)
        issuer_app.router.add_get("/authorize", authorize)
        issuer_app.router.add_post("/token", token)
        self.server = TestServer(issuer_app, host="127.0.0.1")
        await self.server.start_server()


async def _dashboard(issuer: SignInIssuer, roles: Roles, secret: str | None = None) -> TestServer:
    """The dashboard's login in front of one page that names the viewer, with the issuer configured."""
    from iris.auth.api import Gate
    from iris.dashboard import login

    verifier = OidcVerifier(issuer.url, "iris-dashboard", roles)  # type: ignore[arg-type]
    gate = Gate(Verifiers((verifier,)), roles, verifier, secret)  # type: ignore[arg-type]
    app = web.Application(middlewares=[login.guard(gate)])
    login.add_routes(app, gate, None)  # type: ignore[arg-type]

    async def queue(request: web.Request) -> web.Response:
        who = login.viewer(request)
        assert who is not None
        return web.Response(text=f"queue for {who.name} ({who.role})")

    app.router.add_get("/queue", queue)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


async def test_the_dashboard_signs_users_in_at_the_issuer() -> None:
    """With an OIDC issuer and audience configured, the login page offers signing in there; the code comes back,
    is exchanged with the PKCE verifier, and the ID token becomes the login cookie: the next page knows the user
    and the role Iris holds for that name."""
    issuer = SignInIssuer("ana")
    await issuer.start()
    dashboard = await _dashboard(issuer, Roles({"ana@example.com": "admin"}), secret="s3cret")
    try:
        async with ClientSession(cookie_jar=CookieJar(unsafe=True), headers={"Accept": "text/html"}) as browser:
            base = str(dashboard.make_url("")).rstrip("/")
            async with browser.get(f"{base}/queue") as page:
                assert 401 == page.status
                assert f"sign in at {issuer.url}" in await page.text()
            async with browser.get(f"{base}/login/oidc") as signed_in:
                assert 200 == signed_in.status, await signed_in.text()
                assert "Signed in as ana@example.com" in await signed_in.text()
            async with browser.get(f"{base}/queue") as page:
                assert (200, "queue for ana@example.com (admin)") == (page.status, await page.text())
        assert [f"Basic {base64.b64encode(b'iris-dashboard:s3cret').decode()}"] == issuer.secrets_seen
    finally:
        await dashboard.close()
        assert issuer.server is not None
        await issuer.server.close()


async def test_a_sign_in_that_does_not_check_out_is_refused() -> None:
    """A callback whose state is not the one this browser started, an ID token with another sign-in's nonce, and
    the issuer's own refusal each end on the login page (401) with a reason, and set no login cookie."""
    issuer = SignInIssuer("ana")
    await issuer.start()
    dashboard = await _dashboard(issuer, Roles({}))
    try:
        base = str(dashboard.make_url("")).rstrip("/")
        async with ClientSession(cookie_jar=CookieJar(unsafe=True), headers={"Accept": "text/html"}) as browser:
            async with browser.get(f"{base}/login/oidc/callback?code=x&state=forged") as page:
                assert 401 == page.status and "sign-in expired or was not started here" in await page.text()
            issuer.nonce = "another-sign-in"
            async with browser.get(f"{base}/login/oidc") as page:
                assert 401 == page.status and "nonce" in await page.text()
            async with browser.get(f"{base}/login/oidc/callback?error=access_denied&error_description=no+way") as page:
                assert 401 == page.status and "the sign-in service refused: no way" in await page.text()
            async with browser.get(f"{base}/queue") as page:
                assert 401 == page.status
            assert "iris_token" not in {cookie.key for cookie in browser.cookie_jar}
    finally:
        await dashboard.close()
        assert issuer.server is not None
        await issuer.server.close()


async def test_behind_a_tls_proxy_the_issuer_sends_the_browser_back_to_the_proxy() -> None:
    """The redirect URI the issuer is given is the dashboard as the browser sees it: the proxy's scheme and host."""
    issuer = SignInIssuer("ana")
    await issuer.start()
    dashboard = await _dashboard(issuer, Roles({}))
    try:
        async with ClientSession() as browser, browser.get(
            str(dashboard.make_url("/login/oidc")), allow_redirects=False,
            headers={"X-Forwarded-Proto": "https", "X-Forwarded-Host": "iris.example.com"},
        ) as started:  # fmt: skip
            assert 302 == started.status
            location = started.headers["Location"]
            assert location.startswith(f"{issuer.url}/authorize?")
            sent = parse_qs(urlsplit(location).query)["redirect_uri"]
            assert ["https://iris.example.com/login/oidc/callback"] == sent
    finally:
        await dashboard.close()
        assert issuer.server is not None
        await issuer.server.close()
