"""The first admin of a team-mode cluster: created once, its token handed to whoever set the cluster up.

The local cluster writes it to `$IRIS_HOME/admin.token` (mode 0600) when it is created; an existing
deployment's operator runs `iris auth bootstrap` with the controller's Temporal credentials and
gets it printed once. Either way it works only while no admin holds a token, so running it again
cannot mint a second admin behind the first one's back.
"""

from __future__ import annotations

import os
from pathlib import Path

from temporalio.client import Client

from iris.auth import store
from iris.auth.rules import Role

ADMIN_TOKEN_FILE = "admin.token"
FIRST_ADMIN = "admin"


async def bootstrap(client: Client, name: str = FIRST_ADMIN) -> str:
    """Create the first admin `name`; its token. ValueError once an admin exists."""
    return await store.add_user(client, name, Role.ADMIN.value, by="bootstrap", bootstrap=True)


def write_secret(path: Path, token: str) -> None:
    """`token` into `path`, created readable by its owner only (never widened by the umask or a race)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")


def write_admin_token(home: Path, address: str) -> Path | None:
    """The local cluster's first admin, into `home/admin.token`, unless that file exists already."""
    from iris.local.readiness import readiness_client, run_sync

    path = home / ADMIN_TOKEN_FILE
    if path.exists():
        return None

    async def create() -> str | None:
        client = await readiness_client(address)
        try:
            return await bootstrap(client)
        except ValueError:  # an admin exists (the file was deleted): nothing to write
            return None

    token = run_sync(create())
    if token is None:
        return None
    write_secret(path, token)
    return path


__all__ = ["ADMIN_TOKEN_FILE", "bootstrap", "write_admin_token", "write_secret"]
