"""Where a client goes in team mode: the Iris API's URL and the caller's token, or None for Temporal as before.

- an `http(s)://` address (given, or in IRIS_TEMPORAL_ADDRESS) is an Iris API;
- no address (and no IRIS_TEMPORAL_ADDRESS) reaches the local cluster in $IRIS_HOME, and when that
  cluster runs in team mode, its API (the dashboard's port); so does its Temporal address with a token;
- anything else is a Temporal address: the unauthenticated path, unchanged. An explicit `token=`
  there is a mistake (a token opens the Iris API, never Temporal), said so at once.
"""

from __future__ import annotations

import os

from iris.auth.remote import resolve_token
from iris.connection import ENV_PREFIX, is_api_url


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
