"""Where a client goes in team mode: the Iris API's URL and the caller's token, or None for Temporal as before.

- an `http(s)://` address (given, or in IRIS_TEMPORAL_ADDRESS) is an Iris API;
- no address (and no IRIS_TEMPORAL_ADDRESS) reaches the local cluster in $IRIS_HOME, and when that
  cluster runs in team mode, its API (the dashboard's port);
- anything else is a Temporal address: the unauthenticated path, unchanged. An explicit `token=`
  there is a mistake (a token opens the Iris API, never Temporal), said so at once.
"""

from __future__ import annotations

import os

from iris.auth.remote import is_api_url, resolve_token
from iris.connection import ENV_PREFIX


def local_team_url() -> str | None:
    """The local cluster's API URL when it is recorded in team mode, else None."""
    from iris.local_cluster import LocalCluster

    info = LocalCluster().status()
    if info is None or info.auth == "none" or not info.dashboard_url:
        return None
    return info.dashboard_url


def team_api(
    address: str | None, token: str | None, *, explicit_settings: bool = False
) -> tuple[str, str | None] | None:
    """(API URL, token) when this connection goes through the Iris API; None for a Temporal connection."""
    if address is None and not explicit_settings and is_api_url(os.environ.get(f"{ENV_PREFIX}ADDRESS")):
        address = os.environ[f"{ENV_PREFIX}ADDRESS"]  # IRIS_TEMPORAL_ADDRESS=http://...: the Iris API
    if is_api_url(address):
        return str(address), resolve_token(token)
    if address is None and not explicit_settings and not os.environ.get(f"{ENV_PREFIX}ADDRESS"):
        url = local_team_url()
        if url is not None:
            return url, resolve_token(token)
    if token is not None:
        raise ValueError(
            f"token: a token opens an Iris API (http://HOST:PORT), not Temporal at {address or 'this address'}"
        )
    return None


__all__ = ["local_team_url", "team_api"]
