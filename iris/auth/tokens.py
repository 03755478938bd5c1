"""Tokens Iris issues: random, shown once, stored only as a hash.

A token is `iris_<name>_<43 url-safe characters>` (256 random bits). The name in it is only a hint
for the person holding it; the hash of the whole token is what is looked up. A plain SHA-256 is the
right hash here (as for GitHub's or PyPI's API tokens): the secret has 256 bits of entropy, so a
slow password hash would add cost and no safety.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

PREFIX = "iris_"


def new_token(name: str) -> str:
    """A fresh token for `name` (print it once; keep only `token_hash(token)`)."""
    return f"{PREFIX}{name}_{secrets.token_urlsafe(32)}"


def token_hash(token: str) -> str:
    """What Iris keeps of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def same_hash(a: str, b: str) -> bool:
    """Constant-time comparison of two hashes."""
    return hmac.compare_digest(a.encode(), b.encode())


def looks_like_iris_token(token: str) -> bool:
    """True for a token this module issued (an OIDC JWT has dots and no prefix)."""
    return token.startswith(PREFIX)


__all__ = ["PREFIX", "looks_like_iris_token", "new_token", "same_hash", "token_hash"]
