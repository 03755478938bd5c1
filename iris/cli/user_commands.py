"""`iris user list` and `iris user credits USER [AMOUNT]`: what the scheduler publishes of users, and the
operator's balance setting."""

from __future__ import annotations

import math
from typing import Annotated

import typer
from rich.table import Table

from iris.cli.common import StoreOpt, TemporalOpt, err, fail, iris_client, out

user_app = typer.Typer(help="Users: credits, usage, running and pending work.", no_args_is_help=True)


def _credits(value: float) -> str:
    return f"{value:,.2f}"


def _amount(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise fail(f"AMOUNT must be a number of credits, got {text!r}") from None
    if not math.isfinite(value):
        raise fail(f"AMOUNT must be a finite number of credits, got {text!r}")
    return value


@user_app.command("list")
def user_list(temporal: TemporalOpt = None, store: StoreOpt = None) -> None:
    """Every user the scheduler knows of: credits left, credits used, running tasks, pending jobs."""
    table = Table("USER", "CREDITS", "USED", "RUNNING", "PENDING")
    for u in iris_client(temporal, store).list_users():
        table.add_row(u.user, _credits(u.credits), _credits(u.used), str(u.running_tasks), str(u.pending_jobs))
    out.print(table)


@user_app.command("credits", context_settings={"ignore_unknown_options": True})  # a balance may be negative: -5
def user_credits(
    user: Annotated[str, typer.Argument(help="the user")],
    amount: Annotated[str | None, typer.Argument(help="set the remaining balance to this (an operator's call)")] = None,
    temporal: TemporalOpt = None, store: StoreOpt = None,
) -> None:
    """Show USER's credits, or set them to AMOUNT."""
    value = _amount(amount) if amount is not None else None  # a usage error before connecting anywhere
    client = iris_client(temporal, store)
    if value is None:
        row = client.user_status(user)
        if row is None:
            out.print(f"{user}: no usage yet (starts with the cluster's default credits)", highlight=False)
        else:
            out.print(f"{user}: {_credits(row.credits)} credits left, {_credits(row.used)} used", highlight=False)
        return
    try:
        client.set_credits(user, value)
    except ValueError as e:
        raise fail(str(e)) from None
    err.print(f"{user}: credits set to {_credits(value)}", highlight=False)
