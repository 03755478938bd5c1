"""A process that opened a Temporal client closes what is open at exit, then lets the SDK's threads finish.

Without the grace, a submit-and-exit script died by SIGABRT or SIGSEGV in 3 of 869 runs
(`python -m benchmarks client-exit` measures it; iris/exit_grace.py says why).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from iris import exit_grace
from iris.client import iris_client
from iris.connection import connect_client


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What the exit did, in order: closers by name, then ("sleep", seconds)."""
    seen: list[Any] = []
    monkeypatch.setattr(exit_grace, "_closers", [])
    monkeypatch.setattr(exit_grace, "_opened", False)
    monkeypatch.setattr(exit_grace, "_sleep", lambda seconds: seen.append(("sleep", seconds)))
    return seen


def test_the_open_clients_close_before_the_grace_the_last_registered_first(calls: list[Any]) -> None:
    exit_grace.on_exit(lambda: calls.append("first"))
    exit_grace.on_exit(lambda: calls.append("second"))
    exit_grace.client_opened()
    exit_grace._leave()
    assert ["second", "first", ("sleep", exit_grace.GRACE_SECONDS)] == calls


def test_a_failing_closer_does_not_skip_the_others_or_the_grace(calls: list[Any]) -> None:
    def broken() -> None:
        raise OSError("already gone")

    exit_grace.on_exit(lambda: calls.append("first"))
    exit_grace.on_exit(broken)
    exit_grace.client_opened()
    exit_grace._leave()
    assert ["first", ("sleep", exit_grace.GRACE_SECONDS)] == calls


def test_a_process_that_opened_no_temporal_client_leaves_at_once(calls: list[Any]) -> None:
    exit_grace.on_exit(lambda: calls.append("closed"))
    exit_grace._leave()
    assert ["closed"] == calls


def test_opening_a_client_arms_the_grace_even_when_the_server_is_unreachable(calls: list[Any]) -> None:
    """A failed connect started the SDK's runtime threads too."""
    with pytest.raises(RuntimeError):
        asyncio.run(connect_client("127.0.0.1:1"))
    exit_grace._leave()
    assert [("sleep", exit_grace.GRACE_SECONDS)] == calls


def test_the_blocking_clients_left_open_are_closed_at_exit() -> None:
    assert iris_client._close_open_clients in exit_grace._closers
