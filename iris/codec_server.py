"""`iris codec-server`: decode Iris's encrypted payloads for a key holder's Temporal UI.

The Temporal UI (and `temporal workflow show --codec-endpoint`) posts payloads to a codec server
(Temporal's "remote codec" protocol: `POST /decode` and `POST /encode` with `{"payloads": [...]}`
in protobuf JSON). Run it where the key is, on loopback, and point your UI session at it
("Data Encoder" settings): your browser sees plaintext, everyone else's UI shows ciphertext.
"""

from __future__ import annotations

import json

from aiohttp import web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from iris.codec import EncryptionCodec

_ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"


def make_app(codec: EncryptionCodec, ui_origins: tuple[str, ...] = ()) -> web.Application:
    """The codec server's routes; `ui_origins` are the Temporal UI origins allowed to call it (CORS)."""

    def cors(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        origin = request.headers.get("Origin", "")
        if origin and origin in ui_origins:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Allow-Methods"] = "POST, OPTIONS"
            response.headers["Access-Control-Allow-Headers"] = _ALLOWED_HEADERS
            response.headers["Access-Control-Allow-Credentials"] = "true"
        return response

    async def handle(request: web.Request, decode: bool) -> web.StreamResponse:
        try:
            payloads = json_format.Parse(await request.text(), Payloads())
        except (json_format.ParseError, UnicodeDecodeError) as err:
            return cors(request, web.json_response({"error": f"not a Payloads JSON body: {err}"}, status=400))
        try:
            converted = await (codec.decode if decode else codec.encode)(list(payloads.payloads))
        except ValueError as err:  # another key, or tampered ciphertext
            return cors(request, web.json_response({"error": str(err)}, status=400))
        except Exception as err:  # AES-GCM's InvalidTag carries no message
            return cors(request, web.json_response({"error": f"cannot decrypt: {type(err).__name__}"}, status=400))
        body = json_format.MessageToJson(Payloads(payloads=converted))
        return cors(request, web.Response(text=body, content_type="application/json"))

    async def decode(request: web.Request) -> web.StreamResponse:
        return await handle(request, decode=True)

    async def encode(request: web.Request) -> web.StreamResponse:
        return await handle(request, decode=False)

    async def preflight(request: web.Request) -> web.StreamResponse:
        return cors(request, web.Response(status=200))

    async def health(_: web.Request) -> web.Response:
        return web.Response(text=json.dumps({"status": "ok", "key_id": codec.key_id}), content_type="application/json")

    app = web.Application()
    app.router.add_post("/decode", decode)
    app.router.add_post("/encode", encode)
    app.router.add_route("OPTIONS", "/decode", preflight)
    app.router.add_route("OPTIONS", "/encode", preflight)
    app.router.add_get("/health", health)
    return app
