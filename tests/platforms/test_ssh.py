"""The SSH transport against a real sshd on loopback: commands, streaming, host keys, clear errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.platforms.ssh import HostKeyRefusedError, SshError, SshTarget, SshTransport, parse_address
from tests.sshd import Sshd, free_port, keygen, start_sshd


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    server = start_sshd(tmp_path / "sshd")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def iris_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "iris-home"
    monkeypatch.setenv("IRIS_HOME", str(home))
    return home


def target(sshd: Sshd, **kwargs: object) -> SshTarget:
    host, port = parse_address(sshd.hosts[0])
    options: dict[str, object] = {"user": sshd.user, "identity_file": sshd.client_key, **kwargs}
    return SshTarget(host=host, port=port, **options)  # type: ignore[arg-type]


async def test_run_returns_status_and_output(sshd: Sshd, iris_home: Path) -> None:
    """A command's exit status, stdout and stderr come back; a non-zero exit is a result, not an error."""
    result = await SshTransport(target(sshd)).run("echo out; echo err >&2; exit 3")
    assert (3, "out\n", "err\n") == (result.exit_status, result.stdout, result.stderr)
    assert "err" == result.last_line()


async def test_run_streaming_yields_lines_as_they_come(sshd: Sshd, iris_home: Path) -> None:
    """Streaming yields each line (stdout and stderr merged) before the command ends."""
    lines = []
    async with SshTransport(target(sshd)) as transport:
        async for line in transport.run_streaming("for i in 1 2 3; do echo $i; sleep 0.2; done; echo done >&2"):
            lines.append(line)
            if line == "1":
                # the command is still sleeping: the first line arrived on its own
                assert ["1"] == lines
        result = await transport.run("echo same-connection")
    assert ["1", "2", "3", "done"] == lines
    assert "same-connection\n" == result.stdout


async def test_first_contact_records_key_and_changed_key_is_refused(sshd: Sshd, iris_home: Path) -> None:
    """accept-new: the first connection records the host key in $IRIS_HOME/known_hosts; a new key is refused."""
    assert (await SshTransport(target(sshd)).run("true")).ok
    known = (iris_home / "known_hosts").read_text().splitlines()
    host_public = sshd.host_key.with_suffix(".pub").read_text().split()[:2]
    assert [f"[127.0.0.1]:{sshd.ports[0]} {' '.join(host_public)}"] == known
    assert (await SshTransport(target(sshd)).run("true")).ok  # the recorded key is trusted again

    sshd.new_host_key()
    with pytest.raises(HostKeyRefusedError) as refused:
        await SshTransport(target(sshd)).run("true")
    message = str(refused.value)
    assert "changed" in message and str(iris_home / "known_hosts") in message and "\n" not in message
    assert known == (iris_home / "known_hosts").read_text().splitlines()  # nothing was overwritten


async def test_configured_known_hosts_is_strict(sshd: Sshd, iris_home: Path, tmp_path: Path) -> None:
    """With known_hosts from config an unknown host is refused (no accept-new); a listed one connects."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    with pytest.raises(HostKeyRefusedError, match="is not in known_hosts"):
        await SshTransport(target(sshd, known_hosts=known)).run("true")
    assert not (iris_home / "known_hosts").exists()
    host_public = sshd.host_key.with_suffix(".pub").read_text().split()[:2]
    known.write_text(f"[127.0.0.1]:{sshd.ports[0]} {' '.join(host_public)}\n")
    assert (await SshTransport(target(sshd, known_hosts=known)).run("true")).ok


async def test_connection_errors_are_one_line(sshd: Sshd, iris_home: Path, tmp_path: Path) -> None:
    """Nothing listening, a key the host does not accept, a command that runs too long: one line each."""
    closed = SshTarget(host="127.0.0.1", port=free_port(), identity_file=sshd.client_key)
    with pytest.raises(SshError, match=r"^ssh \S+@127\.0\.0\.1:\d+: .*[Cc]onnect.*refused") as e1:
        await SshTransport(closed).run("true")
    stranger = tmp_path / "stranger"
    keygen(stranger)
    with pytest.raises(SshError, match="permission denied") as e2:
        await SshTransport(target(sshd, identity_file=stranger)).run("true")
    with pytest.raises(SshError, match=r"did not finish within 0\.5 s") as e3:
        await SshTransport(target(sshd)).run("sleep 5", timeout=0.5)
    for e in (e1, e2, e3):
        assert "\n" not in str(e.value)
