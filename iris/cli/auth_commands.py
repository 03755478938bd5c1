"""`iris auth ...`: users, tokens and the audit log of a team-mode cluster (iris/auth)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from iris.cli.common import StoreOpt, TemporalOpt, fail, iris_client, out, temporal_settings
from iris.cli.error_lines import FAILURE, CliError

if TYPE_CHECKING:
    from iris.client.iris_client import IrisClient

auth_app = typer.Typer(help="Team mode: users, roles, tokens and the audit log.", no_args_is_help=True)

NOT_TEAM = "this cluster runs without team mode (Auth: none): one user, no login; set `auth: tokens` in its config"


def _remote(temporal: str | None, store: str | None = None) -> Any:
    """The client's connection to the Iris API; a one-line failure when the cluster is not in team mode."""
    client: IrisClient = iris_client(temporal, store)
    if not getattr(client._async, "remote", False):
        raise CliError(NOT_TEAM)
    return client


def _plain(text: str) -> None:
    out.print(text, markup=False, highlight=False)


@auth_app.command("add-user")
def add_user(
    name: str,
    admin: Annotated[bool, typer.Option("--admin", help="the user may do everything")] = False,
    worker: Annotated[bool, typer.Option("--worker", help="a credential for `iris worker serve` only")] = False,
    temporal: TemporalOpt = None, store: StoreOpt = None,
) -> None:
    """Admins only: create NAME and print its token once (Iris keeps only a hash of it)."""
    if admin and worker:
        raise fail("--admin and --worker: choose one role")
    client = _remote(temporal, store)
    role = "admin" if admin else "worker" if worker else "user"
    try:
        token = client._run(client._async.add_user(name, role))
    except ValueError as e:  # the name is taken: not a usage error, the command could not do its work
        if " exists" not in str(e):
            raise
        raise fail(str(e), FAILURE) from None
    _plain(token)


@auth_app.command("revoke")
def revoke(name: str, temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Admins only: NAME's tokens stop working (within 10 s on every controller)."""
    client = _remote(temporal, store)
    client._run(client._async.revoke_user(name))
    _plain(f"revoked {name}")


@auth_app.command("whoami")
def whoami(temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Print "NAME ROLE" for the caller's credential."""
    client = _remote(temporal, store)
    name, role = client._run(client._async.whoami())
    _plain(f"{name} {role}")


@auth_app.command("audit")
def audit(
    since: Annotated[
        str | None, typer.Option("--since", help="only entries newer than a DURATION (30s, 1h) or a TIME")
    ] = None,
    temporal: TemporalOpt = None, store: StoreOpt = None,
) -> None:
    """Admins only: who did what, newest first."""
    from iris.cli.parsing import parse_since

    try:
        cutoff = parse_since(since) if since is not None else 0.0
    except ValueError as e:
        raise fail(str(e)) from None
    client = _remote(temporal, store)
    table = Table("TIME (UTC)", "USER", "ACTION", "SUBJECT", "DETAIL")
    for entry in client._run(client._async.audit(cutoff)):
        when = datetime.fromtimestamp(entry.at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        action = entry.action if entry.allowed else f"{entry.action} (refused)"
        table.add_row(when, entry.user, action, entry.subject, entry.detail)
    out.print(table)


@auth_app.command("bootstrap")
def bootstrap(
    name: Annotated[str, typer.Option("--name", help="the first admin's name")] = "admin",
    temporal: TemporalOpt = None, store: StoreOpt = None,
) -> None:
    """For an existing deployment (with the controller's Temporal credentials): create the first admin, print its
    token once. Refused once an admin exists."""
    import asyncio  # here, not at the top: registering the commands runs no loop

    from iris.auth.bootstrap import bootstrap as make_admin

    settings = temporal_settings(temporal)
    if settings.address is None:
        raise fail("bootstrap needs --temporal HOST:PORT (or IRIS_TEMPORAL_ADDRESS) and the controller's credentials")

    async def main() -> str:
        return await make_admin(await settings.connect(), name)

    try:
        token = asyncio.run(main())
    except ValueError as e:
        raise CliError(str(e), 1) from None
    _plain(token)


__all__ = ["auth_app"]
