"""The codec server in team mode: the same credential as the dashboard and the API, admins only.

`iris codec-server --iris-api URL` asks the cluster's Iris API who a caller's bearer token is (its
`whoami`) and lets admins decode: the codec server decrypts every job's inputs and results, which in
team mode only the job's owner and admins may read, so only admins may use it. Answers are cached for
CACHE_SECONDS (a revoked token stops within that, well inside the 10 s the API promises).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import aiohttp

CACHE_SECONDS = 5.0


@dataclass
class IrisApiAuth:
    """An `iris.security.codec_server.Authenticator` that defers to the Iris API's verification."""

    url: str
    _seen: dict[str, tuple[float, str | None]] = field(default_factory=dict, repr=False)

    async def refuse(self, authorization: str | None) -> str | None:
        if not authorization or not authorization.lower().startswith("bearer "):
            return "missing bearer token (Authorization: Bearer <Iris token>)"
        cached = self._seen.get(authorization)
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        verdict = await self._ask(authorization)
        self._seen[authorization] = (time.monotonic(), verdict)
        if len(self._seen) > 10_000:
            self._seen.clear()
        return verdict

    async def _ask(self, authorization: str) -> str | None:
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
                session.get(self.url.rstrip("/") + "/api/v1/whoami", headers={"Authorization": authorization}) as r,
            ):
                if r.status != 200:
                    return f"token refused by the Iris API ({r.status})"
                me = await r.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            return f"cannot check the token with the Iris API at {self.url}: {err}"
        if me.get("role") != "admin":
            return f"{me.get('name')} ({me.get('role')}) may not decode payloads: admins only"
        return None


__all__ = ["IrisApiAuth"]
