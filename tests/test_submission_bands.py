"""Submitting with a priority band and a user: validated at submit, unknown bands a usage error on the CLI."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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
