"""One interface for every credential team mode accepts: `Verifier.identify(token) -> Identity`.

- `TokenVerifier`: tokens `iris auth add-user` issued, looked up by hash in the directory (iris/auth/store.py).
- `OidcVerifier`: an OIDC/JWT bearer token from the configured issuer, checked by the codec server's
  `OidcAuth` (signature against the issuer's JWKS, issuer, audience, expiry); the user is its
  `preferred_username` (else `email`'s local part, else `sub`), with the role the directory gives that name
  (`user` for a name Iris does not know; refused once revoked).
- `Verifiers`: the first verifier that claims the token's kind decides.
Every failure is `AuthenticationError` with one line saying why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from iris.auth.errors import AuthenticationError
from iris.auth.rules import Identity, Role
from iris.auth.store import Directory
from iris.auth.tokens import looks_like_iris_token


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
        import asyncio

        import jwt

        from iris.security.codec_server import OidcAuth

        if self._auth is None:
            self._auth = OidcAuth(self.issuer, self.audience)
        try:
            claims = await asyncio.to_thread(self._auth._verify, token)
        except jwt.PyJWTError as err:
            raise AuthenticationError(f"access token refused: {err}") from None
        except (OSError, ValueError, KeyError) as err:
            raise AuthenticationError(f"cannot check the access token against {self.issuer}: {err}") from None
        name = oidc_name(claims)
        role = await self.directory.role_of(name)
        if role == "":
            raise AuthenticationError(f"user {name} was revoked")
        return Identity(name, Role(role or Role.USER), via="oidc")


def oidc_name(claims: dict[str, Any]) -> str:
    """The Iris user an OIDC token names: preferred_username, else the email's local part, else sub."""
    for value in (claims.get("preferred_username"), str(claims.get("email") or "").split("@")[0], claims.get("sub")):
        if isinstance(value, str) and value.strip():
            return "".join("-" if ch.isspace() or ch == "/" else ch for ch in value.strip())
    raise AuthenticationError("access token names no user (no preferred_username, email or sub)")


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


__all__ = ["OidcVerifier", "TokenVerifier", "Verifier", "Verifiers", "oidc_name"]
