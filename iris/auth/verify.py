"""One interface for every credential team mode accepts: `Verifier.identify(token) -> Identity`.

- `TokenVerifier`: tokens `iris auth add-user` issued, looked up by hash in the directory (iris/auth/store.py).
- `OidcVerifier`: an OIDC/JWT bearer token from the configured issuer, checked by the codec server's
  `OidcAuth` (signature against the issuer's JWKS, issuer, audience, expiry); the user is its verified
  `email` (else `sub@<issuer host>`: never a bare name, which would be another user's), with the role the
  directory gives that name (`user` for a name Iris does not know; refused once revoked).
- `TaskTokenVerifier`: a task's token (worker_agent/task_token.py), as its job's user while the job runs and
  that user is not revoked.
- `Verifiers`: the first verifier that claims the token's kind decides.
Every failure is `AuthenticationError` with one line saying why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from iris.auth.errors import AuthenticationError
from iris.auth.rules import Identity, Role
from iris.auth.settings import DEFAULT_TASK_TOKEN_RECHECK_SECONDS
from iris.auth.store import Directory
from iris.auth.tokens import looks_like_iris_token
from worker_agent.task_token import job_of, looks_like_task_token


class Verifier(Protocol):
    """Turns a bearer credential into a verified identity, or raises AuthenticationError."""

    def claims(self, token: str) -> bool:
        """Whether this verifier is the one for `token`'s kind."""
        ...

    async def identify(self, token: str) -> Identity: ...


@dataclass
class TokenVerifier:
    directory: Directory

    def claims(self, token: str) -> bool:
        return looks_like_iris_token(token)

    async def identify(self, token: str) -> Identity:
        user = await self.directory.user_of(token)
        if user is None:
            raise AuthenticationError("unknown or revoked token")
        return Identity(user.name, Role(user.role), via="token")


@dataclass
class OidcVerifier:
    issuer: str
    audience: str | None
    directory: Directory
    _auth: Any = None

    def claims(self, token: str) -> bool:
        return token.count(".") == 2

    async def identify(self, token: str) -> Identity:
        return await self.identity(await self.verified_claims(token))

    async def verified_claims(self, token: str) -> dict[str, Any]:
        """The token's claims once signature, issuer, audience and expiry hold; else AuthenticationError."""
        import asyncio

        import jwt

        from iris.security.codec_server import OidcAuth

        if self._auth is None:
            self._auth = OidcAuth(self.issuer, self.audience)
        try:
            claims: dict[str, Any] = await asyncio.to_thread(self._auth._verify, token)
        except jwt.PyJWTError as err:
            raise AuthenticationError(f"access token refused: {err}") from None
        except (OSError, ValueError, KeyError) as err:
            raise AuthenticationError(f"cannot check the access token against {self.issuer}: {err}") from None
        return claims

    async def identity(self, claims: dict[str, Any]) -> Identity:
        """The user verified claims name, with the role the directory gives that name."""
        name = oidc_name(claims, self.issuer)
        role = await self.directory.role_of(name)
        if role == "":
            raise AuthenticationError(f"user {name} was revoked")
        return Identity(name, Role(role or Role.USER), via="oidc")


def oidc_name(claims: dict[str, Any], issuer: str) -> str:
    """The Iris user an OIDC token names: its whole e-mail address (unless the issuer says it is unverified),
    else `sub@<issuer host>`.

    Always qualified: a name a user may pick at the issuer (preferred_username, an address's local part)
    would let anyone who can sign in there be `admin`, or any user Iris issued a token to, with their role.
    An admin gives an SSO user a role by adding that exact name (`iris auth add-user ana@example.com --admin`).
    """
    email, sub = claims.get("email"), claims.get("sub")
    if isinstance(email, str) and "@" in email.strip() and claims.get("email_verified") is not False:
        value = email.strip()
    elif isinstance(sub, str) and sub.strip():
        value = f"{sub.strip()}@{urlsplit(issuer).netloc or issuer}"
    else:
        raise AuthenticationError("access token names no user (no verified email, no sub)")
    return "".join("-" if ch.isspace() or ch == "/" else ch for ch in value)


@dataclass
class TaskTokenVerifier:
    """A task's token: the job's user (its root's, for a child), with the job named, while the job runs.

    `key` reads the control plane's key from the store; `job_state` is (user, running, started: epoch
    seconds) for a job id, KeyError for none, taken as read for `recheck` seconds (`auth.task_token_recheck`: a
    task token dies this late at most). A token that does not check against the key read at first
    is checked once more against the key read again (another controller may have made the one that stayed).
    """

    key: Callable[[], bytes]
    job_state: Callable[[str], Awaitable[tuple[str, bool, float]]]
    directory: Directory | None = None  # a revoked user's running jobs stop acting as them
    recheck: float = DEFAULT_TASK_TOKEN_RECHECK_SECONDS
    _key: bytes | None = None
    _jobs: dict[str, tuple[float, str, bool, float]] = field(default_factory=dict)

    def claims(self, token: str) -> bool:
        return looks_like_task_token(token)

    async def identify(self, token: str) -> Identity:
        import asyncio
        import time

        if self._key is None:
            self._key = await asyncio.to_thread(self.key)
        job_id = job_of(self._key, token)
        if job_id is None:
            self._key = await asyncio.to_thread(self.key)
            job_id = job_of(self._key, token)
        if job_id is None:
            raise AuthenticationError("task token refused: not minted by this cluster's agents")
        now = time.monotonic()
        seen = self._jobs.get(job_id)
        if seen is None or now - seen[0] > self.recheck:
            try:
                user, running, started = await self.job_state(job_id)
            except KeyError:
                raise AuthenticationError(f"task token refused: no job {job_id}") from None
            seen = self._jobs[job_id] = (now, user, running, started)
            if len(self._jobs) > 10_000:
                self._jobs.pop(next(iter(self._jobs)))
        if not seen[2]:
            raise AuthenticationError(f"task token refused: job {job_id} has ended")
        if self.directory is not None and await self.directory.role_of(seen[1]) == "":
            raise AuthenticationError(f"task token refused: user {seen[1]} was revoked")
        if self.directory is not None and seen[3] < await self.directory.life_began(seen[1]):
            # Revoked since the job started, then added again: a token of the old life may have leaked.
            raise AuthenticationError(f"task token refused: user {seen[1]} was revoked after job {job_id} started")
        return Identity(seen[1], Role.USER, via="task", job=job_id)


@dataclass
class Verifiers:
    chain: tuple[Verifier, ...]

    async def identify(self, token: str | None) -> Identity:
        if not token:
            raise AuthenticationError("no credential: pass token= to connect(), or set IRIS_TOKEN or IRIS_TOKEN_FILE")
        for verifier in self.chain:
            if verifier.claims(token):
                return await verifier.identify(token)
        raise AuthenticationError("not a token this cluster accepts")


__all__ = ["OidcVerifier", "TaskTokenVerifier", "TokenVerifier", "Verifier", "Verifiers", "oidc_name"]
