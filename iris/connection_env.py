"""The environment variables that say where a cluster is, apart from the settings that read them (iris.connection).

Every `iris` command declares its `--temporal` and `--store` options with these names, and most commands
never connect (`--help`, a refused option): naming a variable does not load pydantic (~0.1 s of CPU). Nor
does telling an Iris API's address from Temporal's (`is_api_url`): a team-mode client needs no settings.
"""

from __future__ import annotations

ENV_PREFIX = "IRIS_TEMPORAL_"
ADDRESS_ENV = f"{ENV_PREFIX}ADDRESS"  # where a client finds Temporal (`--temporal` over it)
STORE_ENV = "IRIS_STORE"  # the blob and log store's URL (`--store` over it)


def is_api_url(address: str | None) -> bool:
    """Whether `address` names an Iris API (team mode: http(s)://HOST:PORT) rather than a Temporal frontend."""
    return bool(address) and str(address).startswith(("http://", "https://"))
