"""Where a client goes in team mode: the Iris API's URL and the caller's token, or None for Temporal as before.

- an `http(s)://` address (given, or in IRIS_TEMPORAL_ADDRESS) is an Iris API;
- no address (and no IRIS_TEMPORAL_ADDRESS) reaches the local cluster in $IRIS_HOME, and when that
  cluster runs in team mode, its API (the dashboard's port); so does its Temporal address with a token;
- anything else is a Temporal address: the unauthenticated path, unchanged. An explicit `token=`
  there is a mistake (a token opens the Iris API, never Temporal), said so at once.
"""

from __future__ import annotations

import os
from pathlib import Path

from iris.auth.errors import AuthenticationError
from iris.connection_env import ENV_PREFIX, is_api_url
from worker_agent.task_token import TOKEN_FILE_ENV

TOKEN_ENV = "IRIS_TOKEN"


def local_team() -> tuple[str, str] | None:
    """(API URL, Temporal address) of the local cluster in $IRIS_HOME when it is recorded in team mode, else None."""
    from activities.home import iris_home
    from iris.local.record import ClusterRecord

    state = ClusterRecord(iris_home()).read()  # the record alone: no process is probed on the default path
    if state is None or state.get("auth", "none") == "none" or not state.get("dashboard_url"):
        return None
    return str(state["dashboard_url"]), str(state.get("address", ""))


def team_api(
    address: str | None, token: str | None, *, explicit_settings: bool = False
) -> tuple[str, str | None] | None:
    """(API URL, token) when this connection goes through the Iris API; None for a Temporal connection.

    A caller holding a token (given, IRIS_TOKEN or IRIS_TOKEN_FILE) who names the local team cluster's own
    Temporal address is sent to its API too: a token always means the API's checks.
    """
    given = address
    if given is None and not explicit_settings:
        given = os.environ.get(f"{ENV_PREFIX}ADDRESS") or None
    if is_api_url(given):
        return str(given), resolve_token(token)
    credential = resolve_token(token)
    if given is None or credential is not None:
        local = local_team()
        if local is not None and given in (None, local[1]):
            return local[0], credential
    if token is not None:
        raise ValueError(
            f"token: a token opens an Iris API (http://HOST:PORT), not Temporal at {given or 'this address'}"
        )
    return None


__all__ = ["local_team", "team_api"]


def resolve_token(token: str | None = None) -> str | None:
    """The caller's credential: `token`, else IRIS_TOKEN, else the contents of IRIS_TOKEN_FILE, else None."""
    if token is not None:
        if not isinstance(token, str) or not token.strip():
            raise ValueError("token must be a non-empty string")
        return _one_token(token.strip(), "token=")
    if os.environ.get(TOKEN_ENV, "").strip():
        return _one_token(os.environ[TOKEN_ENV].strip(), TOKEN_ENV)
    path = os.environ.get(TOKEN_FILE_ENV, "").strip()
    if path:
        try:
            text = Path(path).expanduser().read_text().strip()
        except OSError as err:  # no credential to present: as a missing token is
            raise AuthenticationError(f"{TOKEN_FILE_ENV}: cannot read {path}: {err.strerror or err}") from None
        return _one_token(text, f"{TOKEN_FILE_ENV} ({path})") if text else None
    return None


def _one_token(token: str, source: str) -> str:
    """A token is one word: spaces, lines or control characters inside it mean the wrong thing was passed."""
    if any(ch.isspace() or not ch.isprintable() for ch in token):
        raise AuthenticationError(f"{source}: not one token (it holds spaces, several lines or control characters)")
    return token
