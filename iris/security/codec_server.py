"""`iris codec-server`: decode Iris's encrypted payloads for a key holder's Temporal UI (or `temporal` CLI).

The Temporal UI (and `temporal workflow show --codec-endpoint`) posts payloads to a codec server
(Temporal's "remote codec" protocol: `POST /decode` and `POST /encode` with `{"payloads": [...]}`
in protobuf JSON). Run it where the key is and point your UI session at it ("Data Encoder"
settings): your browser sees plaintext, everyone else's UI shows ciphertext.

Threat model. The server holds the key and decrypts whatever it is sent, so whoever can call it
reads every job's inputs and results (and can encrypt payloads that controllers will trust). Three
checks stand between a caller and the key, and all must pass:

- **Where it listens**: loopback by default (`--host`); only processes on this machine reach it.
  Another user on a shared host, or any local process, still can: hence the next two checks.
- **Who is calling** (the `Authorization` header): either a bearer token you configure
  (`IRIS_CODEC_SERVER_TOKEN` or `--token-file`, compared in constant time; the `temporal` CLI sends
  it with `--codec-auth`), or an OIDC access token from your identity provider (`--oidc-issuer`,
  optionally `--oidc-audience`): its signature is checked against the issuer's published keys, and
  its issuer, audience and expiry are checked. The Temporal UI sends the signed-in user's access
  token when its codec setting "Pass access token" is on. Without either, the server refuses to
  start unless `--no-auth` says so explicitly.
- **From which page** (the `Origin` header of a browser request): only the Temporal UI origins
  given with `--ui-origin` may call it (CORS); a request from any other web page is refused (403)
  before anything is decrypted, so a page you visit cannot use your session's access to the key.

Not defended against: anyone who holds the key itself (every Iris process of the deployment), a
compromised machine the server runs on, and a caller with a valid token (tokens are as powerful as
the key for reading; keep them short-lived, e.g. your IdP's access tokens). `/health` answers
without authentication and tells only the key id, which every encrypted payload carries anyway.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from iris.security.codec import EncryptionCodec, UnreadablePayload

_ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"
TOKEN_ENV = "IRIS_CODEC_SERVER_TOKEN"


class Authenticator(Protocol):
    """Checks a request's `Authorization` header; None when it may call, else why not (one line)."""

    async def refuse(self, authorization: str | None) -> str | None: ...


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


@dataclass(frozen=True)
class NoAuth:
    """Every caller may decode (`--no-auth`): the listening address and the origin allowlist are all that guard it."""

    async def refuse(self, authorization: str | None) -> str | None:
        return None


@dataclass(frozen=True)
class TokenAuth:
    """A shared bearer token, compared in constant time."""

    token: str = field(repr=False)
    source: str = TOKEN_ENV  # where the token was given (`--token-file`), named by the error

    def __post_init__(self) -> None:
        if len(self.token) < 16:
            raise ValueError(f"{self.source}: the codec server's token must be at least 16 characters")

    async def refuse(self, authorization: str | None) -> str | None:
        given = _bearer(authorization)
        if given is None:
            return "missing bearer token (Authorization: Bearer <token>)"
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return "wrong bearer token"
        return None


@dataclass
class OidcAuth:
    """An OIDC access token (a JWT) signed by `issuer`'s published keys, for `audience` when given, not expired."""

    issuer: str
    audience: str | None = None
    algorithms: Sequence[str] = ("RS256", "ES256", "PS256", "EdDSA")
    _jwks: Any = field(default=None, init=False, repr=False)

    def _keys(self) -> Any:
        """PyJWT's JWKS client for the issuer's `jwks_uri` (from its discovery document), made once."""
        if self._jwks is None:
            import urllib.request

            import jwt

            url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
            with urllib.request.urlopen(url, timeout=10) as response:
                discovery = json.loads(response.read())
            self._jwks = jwt.PyJWKClient(discovery["jwks_uri"], cache_keys=True, lifespan=300)
        return self._jwks

    def _verify(self, token: str) -> dict[str, Any]:
        """The token's claims once its signature, issuer, audience and expiry hold; a PyJWTError otherwise."""
        import jwt

        key = self._keys().get_signing_key_from_jwt(token).key
        return jwt.decode(
            token, key, algorithms=list(self.algorithms), issuer=self.issuer, audience=self.audience,
            options={"require": ["exp", "iss"], "verify_aud": self.audience is not None}, leeway=30,
        )  # fmt: skip

    async def refuse(self, authorization: str | None) -> str | None:
        import jwt

        token = _bearer(authorization)
        if token is None:
            return "missing bearer token (Authorization: Bearer <OIDC access token>)"
        try:
            await asyncio.to_thread(self._verify, token)
        except jwt.PyJWTError as err:
            return f"access token refused: {err}"
        except (OSError, ValueError, KeyError) as err:  # the issuer's discovery or keys are unreachable
            return f"cannot check the access token against {self.issuer}: {err}"
        return None


def make_app(
    codec: EncryptionCodec, ui_origins: tuple[str, ...] = (), auth: Authenticator | None = None
) -> web.Application:
    """The codec server's routes; `ui_origins` are the Temporal UI origins allowed to call it (CORS).

    `auth` checks each decode/encode call's `Authorization` header; None lets every caller in (`--no-auth`).
    """
    checker: Authenticator = auth or NoAuth()

    def cors(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        origin = request.headers.get("Origin", "")
        if origin and origin in ui_origins:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Allow-Methods"] = "POST, OPTIONS"
            response.headers["Access-Control-Allow-Headers"] = _ALLOWED_HEADERS
            response.headers["Access-Control-Allow-Credentials"] = "true"
            response.headers["Vary"] = "Origin"
        return response

    def error(request: web.Request, status: int, message: str) -> web.StreamResponse:
        response = web.json_response({"error": message}, status=status)
        if status == 401:
            response.headers["WWW-Authenticate"] = "Bearer"
        return cors(request, response)

    async def handle(request: web.Request, decode: bool) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if origin is not None and origin not in ui_origins:
            return error(request, 403, f"origin {origin} is not allowed (iris codec-server --ui-origin)")
        refused = await checker.refuse(request.headers.get("Authorization"))
        if refused is not None:
            return error(request, 401, refused)
        try:
            payloads = json_format.Parse(await request.text(), Payloads())
        except (json_format.ParseError, UnicodeDecodeError) as err:
            return error(request, 400, f"not a Payloads JSON body: {err}")
        try:
            if decode:
                converted = codec.decode_strict(list(payloads.payloads))
            else:
                converted = await codec.encode(list(payloads.payloads))
        except UnreadablePayload as err:  # another key, or tampered ciphertext
            return error(request, 400, str(err))
        body = json_format.MessageToJson(Payloads(payloads=converted))
        return cors(request, web.Response(text=body, content_type="application/json"))

    async def decode(request: web.Request) -> web.StreamResponse:
        return await handle(request, decode=True)

    async def encode(request: web.Request) -> web.StreamResponse:
        return await handle(request, decode=False)

    async def preflight(request: web.Request) -> web.StreamResponse:
        return cors(request, web.Response(status=200))  # browsers send no Authorization on a preflight

    async def health(_: web.Request) -> web.Response:
        return web.Response(text=json.dumps({"status": "ok", "key_id": codec.key_id}), content_type="application/json")

    app = web.Application()
    app.router.add_post("/decode", decode)
    app.router.add_post("/encode", encode)
    app.router.add_route("OPTIONS", "/decode", preflight)
    app.router.add_route("OPTIONS", "/encode", preflight)
    app.router.add_get("/health", health)
    return app
