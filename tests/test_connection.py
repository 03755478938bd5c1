"""Connection settings from IRIS_TEMPORAL_*, the submitting identity, and what daemons inherit."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from iris.connection import TemporalSettings, api_key_subject
from iris.local.cluster import daemon_environment, private_directory
from tests.tls_relay import make_pki


def jwt(claims: dict[str, object]) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'ES256'})}.{part(claims)}.c2lnbmF0dXJl"


def test_settings_come_from_the_environment_and_options_override(monkeypatch: pytest.MonkeyPatch) -> None:
    """IRIS_TEMPORAL_ADDRESS/NAMESPACE are read; a CLI option given explicitly wins; None options do not."""
    monkeypatch.setenv("IRIS_TEMPORAL_ADDRESS", "temporal.internal:7233")
    monkeypatch.setenv("IRIS_TEMPORAL_NAMESPACE", "ml-team")
    assert ("temporal.internal:7233", "ml-team") == (TemporalSettings.load().address, TemporalSettings.load().namespace)
    assert "other:7233" == TemporalSettings.load(address="other:7233").address
    assert "temporal.internal:7233" == TemporalSettings.load(address=None).address


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"IRIS_TEMPORAL_ADDRESS": "no-port"}, "IRIS_TEMPORAL_ADDRESS"),
        ({"IRIS_TEMPORAL_TLS_CA": "/nonexistent/ca.pem"}, "IRIS_TEMPORAL_TLS_CA"),
        ({"IRIS_TEMPORAL_NAMESPACE": "two words"}, "IRIS_TEMPORAL_NAMESPACE"),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    """Each bad value is a ValueError whose one line starts with the variable's name."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match=f"^{named}: ") as info:
        TemporalSettings.load()
    assert "\n" not in str(info.value)


def test_a_bad_value_given_as_an_argument_names_the_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value passed in (a client's `address=`, the CLI's `--temporal`) is named as passed, not as the variable."""
    monkeypatch.delenv("IRIS_TEMPORAL_ADDRESS", raising=False)
    with pytest.raises(ValueError, match=r"^address: must be HOST:PORT, e\.g\. temporal\.example\.com:7233, got 'x'$"):
        TemporalSettings.load(address="x")
    with pytest.raises(ValueError, match=r"^--temporal: must be HOST:PORT"):
        TemporalSettings.load(names={"address": "--temporal"}, address="x")
    monkeypatch.setenv("IRIS_TEMPORAL_NAMESPACE", "two words")
    with pytest.raises(ValueError, match=r"^IRIS_TEMPORAL_NAMESPACE: "):
        TemporalSettings.load(names={"address": "--temporal"}, address="h:1")


def test_client_certificate_needs_its_key(tmp_path: Path) -> None:
    """A certificate without a key (or a key without a certificate) is refused at construction."""
    pki = make_pki(tmp_path)
    with pytest.raises(ValueError, match="IRIS_TEMPORAL_TLS_KEY"):
        TemporalSettings.load(address="h:1", tls_cert=pki.client_cert)
    with pytest.raises(ValueError, match="IRIS_TEMPORAL_TLS_CERT"):
        TemporalSettings.load(address="h:1", tls_key=pki.client_key)


def test_api_key_never_appears_in_what_is_logged_or_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API key is a secret: not in repr, str, or describe(); describe() says only that one is set."""
    monkeypatch.setenv("IRIS_TEMPORAL_API_KEY", "sekrit-key-123")
    settings = TemporalSettings.load(address="x.tmprl.cloud:7233")
    for text in (repr(settings), str(settings), json.dumps(settings.describe())):
        assert "sekrit-key-123" not in text
    assert settings.describe()["api_key"] is True
    assert settings.uses_tls  # Temporal Cloud: an API key goes over TLS


def test_submitter_is_the_authenticated_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mTLS: the certificate's CN; API key: its JWT subject; neither: the login name."""
    monkeypatch.setenv("USER", "shell-user")
    monkeypatch.setenv("LOGNAME", "shell-user")
    pki = make_pki(tmp_path, client_name="bob@team")
    assert "bob@team" == TemporalSettings.load(tls_cert=pki.client_cert, tls_key=pki.client_key).user()
    assert "carol@team" == TemporalSettings.load(api_key=jwt({"sub": "carol@team"})).user()
    assert "shell-user" == TemporalSettings.load(api_key="opaque-key").user()
    assert "" == api_key_subject("a.b")


def test_daemons_inherit_a_minimal_environment() -> None:
    """PATH, HOME, locale, engine and cloud settings and IRIS_* pass; shell secrets and Temporal TLS settings do not."""
    source = {
        "PATH": "/usr/bin", "HOME": "/home/u", "LC_ALL": "C.UTF-8", "DOCKER_HOST": "unix:///d.sock",
        "AWS_ACCESS_KEY_ID": "k", "IRIS_CODEC_KEY": "c", "GITHUB_TOKEN": "t", "SSH_AUTH_SOCK": "/s",
        "HISTFILE": "/h", "IRIS_TEMPORAL_TLS_CERT": "/c.pem", "IRIS_TEMPORAL_ADDRESS": "far:7233",
    }  # fmt: skip
    assert {"PATH", "HOME", "LC_ALL", "DOCKER_HOST", "AWS_ACCESS_KEY_ID", "IRIS_CODEC_KEY"} == set(
        daemon_environment(source)
    )


def test_iris_home_is_private(tmp_path: Path) -> None:
    """IRIS_HOME is created 0700, and an existing one that others could read is tightened."""
    fresh = private_directory(tmp_path / "new" / "home")
    assert 0o700 == stat.S_IMODE(fresh.stat().st_mode)
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    assert 0o700 == stat.S_IMODE(private_directory(loose).stat().st_mode)
