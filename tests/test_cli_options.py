"""The CLI's shared options: every command takes `--temporal` and `--store` (the spec's CLI section)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer.main

from iris.cli.main import app


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, set[str]]]:
    """Every leaf command with the option names it takes (typer's own click: groups have `commands`)."""
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for name, sub in subcommands.items():
            yield from commands(sub, (*path, name))
    else:
        yield " ".join(("iris", *path)), {opt for param in command.params for opt in getattr(param, "opts", ())}


def test_every_command_that_reaches_a_cluster_takes_temporal_and_store() -> None:
    found = dict(commands(typer.main.get_command(app)))
    assert len(found) > 40  # the walk reached the subcommands
    assert [] == [name for name, opts in found.items() if "--temporal" in opts and "--store" not in opts]
    assert {"iris team list", "iris queue", "iris user list", "iris slice list"} <= {
        name for name, opts in found.items() if {"--temporal", "--store"} <= opts
    }


def test_a_negative_balance_is_an_amount_not_an_option() -> None:
    """`iris user credits ana -5` sets a balance below zero (the spec lets it go there); `-x` is still refused."""
    import subprocess
    import sys

    def iris(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "iris", *args], capture_output=True, text=True, timeout=60)

    negative = iris("user", "credits", "ana", "-5", "--temporal", "127.0.0.1:1")
    assert "No such option" not in negative.stderr and "cannot reach Temporal" in negative.stderr, negative.stderr
    bad = iris("user", "credits", "ana", "-x")
    assert 2 == bad.returncode and "AMOUNT must be a number of credits, got '-x'" in bad.stderr, bad.stderr
