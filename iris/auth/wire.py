"""How the Iris API answers (iris/auth/api.py and the routes beside it): a pickle of the public result types,
which the client (that trusts its cluster, as it trusts the results it unpickles) reads back."""

from __future__ import annotations

import pickle
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from iris.auth.rules import Identity

PICKLE = "application/vnd.iris.pickle"
Handler = Callable[[web.Request, Identity], Awaitable[web.StreamResponse]]


def answer(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=pickle.dumps(value), status=status, content_type=PICKLE)
