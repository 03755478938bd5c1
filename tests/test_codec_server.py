"""The codec server decrypts only for an authenticated caller from an allowed origin (token or OIDC)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives.asymmetric import rsa
from temporalio.api.common.v1 import Payload

from iris.cli.error_lines import run_cli
from iris.cli.main import app
from iris.security.codec import EncryptionCodec, generate_key, load_key
from iris.security.codec_server import OidcAuth, TokenAuth, make_app

KEY = load_key({"IRIS_CODEC_KEY": generate_key()})
TOKEN = "a-long-enough-shared-token"
UI = "http://localhost:8233"
SECRET = "s3cr3t-4711"


def _codec() -> EncryptionCodec:
    assert KEY is not None
    return EncryptionCodec(KEY)


async def _encrypted_body() -> dict[str, Any]:
    [payload] = await _codec().encode([Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(SECRET).encode())])
    return {"payloads": [{"metadata": {k: base64.b64encode(v).decode() for k, v in payload.metadata.items()},
                          "data": base64.b64encode(payload.data).decode()}]}  # fmt: skip


async def _post(server: TestServer, headers: dict[str, str]) -> tuple[int, dict[str, Any], str]:
    async with ClientSession() as session, session.post(
        server.make_url("/decode"), json=await _encrypted_body(), headers=headers
    ) as response:
        return response.status, await response.json(), response.headers.get("Access-Control-Allow-Origin", "")


def _plaintext(body: dict[str, Any]) -> str:
    return base64.b64decode(body["payloads"][0]["data"]).decode()


@pytest.fixture
async def token_server() -> AsyncIterator[TestServer]:
    server = TestServer(make_app(_codec(), (UI,), TokenAuth(TOKEN)), host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


async def test_the_right_token_from_the_ui_origin_decodes(token_server: TestServer) -> None:
    """A caller with the token from the allowed UI origin gets the plaintext and the CORS header."""
    status, body, allowed = await _post(token_server, {"Authorization": f"Bearer {TOKEN}", "Origin": UI})
    assert (200, SECRET, UI) == (status, json.loads(_plaintext(body)), allowed)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong-token-of-some-length"}, 401),
        ({"Authorization": TOKEN}, 401),  # no scheme
        ({"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}, 403),
    ],
)
async def test_no_token_a_wrong_token_or_another_origin_is_refused(
    token_server: TestServer, headers: dict[str, str], status: int
) -> None:
    """Without the right token, or from a page that is not the UI, nothing is decrypted."""
    got, body, _ = await _post(token_server, headers)
    assert status == got
    assert "payloads" not in body and body["error"]


async def test_a_preflight_needs_no_token(token_server: TestServer) -> None:
    """Browsers send no Authorization on a CORS preflight: it is answered, for the allowed origin only."""
    url = token_server.make_url("/decode")
    async with ClientSession() as session, session.options(url, headers={"Origin": UI}) as r:
        assert (200, UI) == (r.status, r.headers.get("Access-Control-Allow-Origin"))


class Issuer:
    """A fake OIDC issuer on loopback: discovery document and JWKS, tokens signed with its RSA key."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.server: TestServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")

    def token(self, *, audience: str = "temporal-ui", issuer: str | None = None, expires_in: float = 300,
              key: Any = None) -> str:
        claims = {"iss": issuer or self.url, "aud": audience, "sub": "ana", "exp": int(time.time() + expires_in)}
        return jwt.encode(claims, key or self.key, algorithm="RS256", headers={"kid": "k1"})

    async def start(self) -> None:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))

        async def discovery(_: web.Request) -> web.Response:
            return web.json_response({"issuer": self.url, "jwks_uri": f"{self.url}/jwks"})

        async def jwks(_: web.Request) -> web.Response:
            return web.json_response({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]})

        issuer_app = web.Application()
        issuer_app.router.add_get("/.well-known/openid-configuration", discovery)
        issuer_app.router.add_get("/jwks", jwks)
        self.server = TestServer(issuer_app, host="127.0.0.1")
        await self.server.start_server()


async def test_oidc_access_tokens_are_checked_against_the_issuer() -> None:
    """A token the issuer signed for the audience decodes; expired, another audience or issuer, or a forged
    signature are refused with a reason."""
    issuer = Issuer()
    await issuer.start()
    assert issuer.server is not None
    server = TestServer(make_app(_codec(), (UI,), OidcAuth(issuer.url, "temporal-ui")), host="127.0.0.1")
    await server.start_server()
    try:
        status, body, _ = await _post(server, {"Authorization": f"Bearer {issuer.token()}"})
        assert (200, SECRET) == (status, json.loads(_plaintext(body)))
        forger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        bad = {
            "expired": issuer.token(expires_in=-120),
            "audience": issuer.token(audience="someone-else"),
            "issuer": issuer.token(issuer="https://other.example"),
            "signature": issuer.token(key=forger),
        }
        refusals = {name: await _post(server, {"Authorization": f"Bearer {token}"}) for name, token in bad.items()}
        assert {name: 401 for name in bad} == {name: r[0] for name, r in refusals.items()}
        assert "expired" in refusals["expired"][1]["error"].lower()
        assert "audience" in refusals["audience"][1]["error"].lower()
        assert "issuer" in refusals["issuer"][1]["error"].lower()
        assert "signature" in refusals["signature"][1]["error"].lower()
    finally:
        await server.close()
        await issuer.server.close()


def test_the_server_will_not_start_without_a_way_to_authenticate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No token, no issuer, no --no-auth: one line saying what to give, exit 2."""
    monkeypatch.setenv("IRIS_CODEC_KEY", generate_key())
    monkeypatch.delenv("IRIS_CODEC_SERVER_TOKEN", raising=False)
    assert 2 == run_cli(app, ["codec-server", "--port", "0"])
    err = capsys.readouterr().err
    assert "needs one way to authenticate callers" in err and "Traceback" not in err
    assert 1 == len(err.strip().splitlines())


async def test_a_payload_under_another_key_is_a_400_naming_both_ids(token_server: TestServer) -> None:
    """The server cannot decrypt another key's payload: it says so, with both key ids, and decrypts nothing."""
    other = load_key({"IRIS_CODEC_KEY": generate_key()})
    assert other is not None
    [payload] = await EncryptionCodec(other).encode([Payload(metadata={"encoding": b"json/plain"}, data=b"1")])
    body = {"payloads": [{"metadata": {k: base64.b64encode(v).decode() for k, v in payload.metadata.items()},
                          "data": base64.b64encode(payload.data).decode()}]}  # fmt: skip
    async with ClientSession() as session, session.post(
        token_server.make_url("/decode"), json=body, headers={"Authorization": f"Bearer {TOKEN}"}
    ) as response:
        assert 400 == response.status
        error = (await response.json())["error"]
    theirs, mine = EncryptionCodec(other).key_id, _codec().key_id
    assert f"payload encrypted with key {theirs}, but this process holds key {mine}" == error
