"""What every `iris` subcommand module shares: the consoles, the connection options, the client, one-line failure.

Why: the command modules (cli, cli_fleet, cli_ops) all need these; keeping them here lets them
import one another's commands without an import cycle.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from iris.cli.error_lines import USAGE, CliError
from iris.cli.logging_config import configure_logging
from iris.connection_env import ADDRESS_ENV, STORE_ENV

if TYPE_CHECKING:  # the client (and the Temporal SDK) is imported by the commands that connect, when they run
    from iris.client.iris_client import IrisClient
    from iris.connection import TemporalSettings

try:  # typer >= 0.2x vendors click: its commands run in its own click's context
    from typer._click.core import ParameterSource
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - older typer on real click
    from click import get_current_context  # type: ignore[assignment,no-redef]
    from click.core import ParameterSource  # type: ignore[assignment,no-redef]

__all__ = [
    "NO_LOCAL_CLUSTER", "StoreOpt", "TemporalOpt", "close_clients", "configure_logging", "err", "fail", "iris_client",
    "on_exit", "out", "source_name", "temporal_settings",
]


def console(stderr: bool = False) -> Console:
    """Rich output that never wraps a line: at the terminal's width on a terminal, unbounded in a pipe."""
    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    return Console(stderr=stderr, soft_wrap=True, width=None if tty else 1_000_000)


err = console(stderr=True)
out = console()

TemporalOpt = Annotated[
    str | None, typer.Option("--temporal", envvar=ADDRESS_ENV, help="Temporal HOST:PORT (default: local cluster)")
]
StoreOpt = Annotated[str | None, typer.Option("--store", envvar=STORE_ENV, help="blob/log store URL")]


NO_LOCAL_CLUSTER = "no local cluster running (start it with `iris cluster up`)"


def temporal_settings(temporal: str | None) -> TemporalSettings:
    """Connection settings: `--temporal` over IRIS_TEMPORAL_ADDRESS, TLS/API key/namespace from IRIS_TEMPORAL_*.

    A bad address names `--temporal` when it was typed as the flag, IRIS_TEMPORAL_ADDRESS when it came from there.
    """
    from iris.connection import TemporalSettings  # pydantic: only for a command that connects

    try:
        return TemporalSettings.load(names={"address": source_name("temporal", temporal, "--temporal", ADDRESS_ENV)},
                                     address=temporal)  # fmt: skip
    except ValueError as e:
        raise fail(str(e)) from None


def source_name(param: str, value: object, flag: str, envvar: str) -> str:
    """`flag` if the command's parameter `param` holds `value` as typed on the command line, else `envvar`.

    An option with an `envvar` gets its value from either; an error should name the one the user set.
    """
    ctx = get_current_context(silent=True)
    typed = (
        ctx is not None
        and ctx.get_parameter_source(param) is ParameterSource.COMMANDLINE
        and ctx.params.get(param) == value
    )
    return flag if typed else envvar


def iris_client(temporal: str | None, store: str | None = None, *, start: bool = False) -> IrisClient:
    """A client of `--temporal`, else of the local cluster; only `start=True` (iris run) may start one.

    Read commands never start a cluster: a stopped one stays stopped and the user is told how to start it.
    Connection failures are `ConnectionError`s ("cannot reach Temporal at ..."), one line via run_cli.
    """
    from iris.auth.connect import team_api

    api = team_api(temporal, None)  # team mode: the Iris API with IRIS_TOKEN / IRIS_TOKEN_FILE, never Temporal
    if api is not None:
        from iris.client.iris_client import IrisClient

        client = IrisClient.connect(api[0], token=api[1])
        open_clients.append(client)
        return client
    settings = temporal_settings(temporal)
    if settings.address is None:
        from activities.home import iris_home
        from iris.local.record import ClusterRecord

        info = ClusterRecord(iris_home()).running_info()  # the record, not the cluster's machinery
        running = info is not None and info.running
        if not start:
            if not running:
                raise CliError(NO_LOCAL_CLUSTER)
            assert info is not None
            settings = settings.model_copy(update={"address": info.address})
            store = store or info.store_url
        elif not running:  # progress for the seconds a start takes; a running cluster is used without a word
            err.print("[dim]starting the local cluster…[/dim]")
    from iris.client.iris_client import IrisClient  # the client and the Temporal SDK: only a command that connects

    client = IrisClient.connect(store=store, settings=settings)
    open_clients.append(client)
    return client


open_clients: list[IrisClient] = []
"""Clients this command opened, closed before the process exits."""


on_exit: list[Callable[[], None]] = []
"""What else a command leaves to do when it ends (a daemon's log shipper flushes its last lines)."""


def close_clients() -> None:
    while open_clients:
        open_clients.pop().close()
    while on_exit:
        on_exit.pop()()


def fail(message: str, code: int = USAGE) -> CliError:
    """Stop the command with one line on stderr (see iris.cli.error_lines); `raise fail(...)` reads as intended."""
    raise CliError(message, code)
