"""Submitting with a priority band and a user: validated at submit, unknown bands a usage error on the CLI."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import pytest
from temporalio.client import Client

from iris.client import schedule_calls
from iris.client.async_client import AsyncIrisClient
from iris.client.submission import build_request, resolve_user


def test_the_default_band_is_interactive_and_requests_carry_the_band_by_name() -> None:
    """Requests carry the band by name, interactive by default; the old integer field stays unused."""
    bands = [build_request(priority=band).band for band in ("batch", "interactive", "production")]
    assert ["batch", "interactive", "production"] == bands
    assert "interactive" == build_request().band
    assert 0 == build_request(priority="production").priority


def test_band_names_are_case_insensitive() -> None:
    """"Production" is production."""
    assert "production" == build_request(priority="Production").band


@pytest.mark.parametrize("bad", ["urgent", "", 5, None, True])
def test_an_unknown_band_or_an_integer_is_a_value_error_naming_priority(bad: object) -> None:
    """The integer priority is gone: anything but a band name is refused, naming the field and the bands."""
    with pytest.raises(ValueError, match=r"^priority must be one of production, interactive, batch, got "):
        build_request(priority=bad)  # type: ignore[arg-type]


def test_the_user_is_iris_user_else_the_login_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """IRIS_USER names the user of a submission; without it the login name does."""
    monkeypatch.setenv("IRIS_USER", "ana")
    assert "ana" == build_request().user
    monkeypatch.delenv("IRIS_USER")
    assert resolve_user() == build_request().user != ""


@pytest.mark.parametrize("bad", ["", "a b", "ana/x", "x" * 101, "tab\there"])
def test_a_bad_user_name_is_a_value_error_naming_user(bad: str) -> None:
    """A user name with spaces, a slash or control characters, or empty or too long, is refused."""
    with pytest.raises(ValueError, match=r"^user must be"):
        resolve_user(bad)


def test_iris_run_with_an_unknown_band_is_a_usage_error() -> None:
    """`iris run --priority urgent` exits 2 with one line naming the flag, before connecting anywhere."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-m", "iris", "run", "--priority", "urgent", "--", "true"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert 2 == done.returncode
    assert "error: --priority must be one of production, interactive, batch, got 'urgent'" == done.stderr.strip()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.submit(print, replica=2), "submit() got an unexpected keyword argument 'replica'"),
        (lambda c: c.submit_command(["true"], max_retries=1),
         "submit_command() got an unexpected keyword argument 'max_retries' "
         "(did you mean 'max_retries_failure' or 'max_retries_preemption'?)"),
        (lambda c: schedule_calls.create(c, "s", print, (), cron="* * * * *", prioriti="batch"),
         "create_schedule() got an unexpected keyword argument 'prioriti' (did you mean 'priority'?)"),
    ],
)
def test_an_unknown_keyword_is_named_as_the_method_the_user_called(
    tmp_path: Path, call: Callable[[AsyncIrisClient], Awaitable[object]], message: str
) -> None:
    """Before anything connects: the TypeError names the method called, never an internal helper."""
    client = AsyncIrisClient(cast(Client, None), tmp_path.as_uri())
    with pytest.raises(TypeError) as raised:
        asyncio.run(cast(Coroutine[Any, Any, object], call(client)))
    assert str(raised.value).startswith(message), raised.value
