"""ManualPlatform's claims against a real sshd: two loopback ports stand for two hosts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from activities.contracts.fleet import PlatformState, ScaleGroupSpec, slice_labels
from activities.platforms.base import QuotaExhausted
from activities.platforms.manual import ManualPlatform, parse_settings
from activities.platforms.ssh import SshError
from tests.sshd import Sshd, start_sshd, worker_command


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    server = start_sshd(tmp_path_factory.mktemp("sshd"), hosts=2)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(autouse=True)
def iris_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("IRIS_HOME", str(tmp_path / "controller-home"))
    return tmp_path / "controller-home"


def group(sshd: Sshd, name: str = "ssh-pool", hosts_per_slice: int = 1, **manual: Any) -> ScaleGroupSpec:
    settings = {
        "hosts": sshd.hosts,
        "user": sshd.user,
        "identity_file": str(sshd.client_key),
        "worker_command": worker_command(),
        **manual,
    }
    return ScaleGroupSpec(
        name=name,
        platform="manual",
        hosts_per_slice=hosts_per_slice,
        cpu_millis=1000,
        memory_bytes=1 << 30,
        settings=settings,
    )


async def test_claim_conflict_and_free(sshd: Sshd) -> None:
    """Each slice claims a free host; a full pool is QuotaExhausted; create is idempotent; terminate frees."""
    g = group(sshd)
    platform = ManualPlatform(g)
    a = await platform.create_slice("pool-a", g)
    b = await platform.create_slice("pool-b", g)
    assert {a.hosts[0].address, b.hosts[0].address} == set(sshd.hosts)
    assert (PlatformState.READY, "pool-a-0", 0) == (a.state, a.hosts[0].worker_id, a.hosts[0].index)
    with pytest.raises(QuotaExhausted, match="needs 1 hosts, 0 of 2 free"):
        await platform.create_slice("pool-c", g)
    again = await platform.create_slice("pool-a", g)
    assert a.hosts == again.hosts  # a retried create finds its own claim, never a second host

    await platform.terminate("pool-a")
    await platform.terminate("pool-a")  # already gone: fine
    assert await platform.describe("pool-a") is None
    c = await platform.create_slice("pool-c", g)
    assert a.hosts[0].address == c.hosts[0].address
    for slice_id in ("pool-b", "pool-c"):
        await platform.terminate(slice_id)
    assert [] == await platform.list_slices({})


async def test_concurrent_claims_never_share_a_host(sshd: Sshd) -> None:
    """Two controllers racing for the same pool: every host ends up with exactly one slice."""
    g = group(sshd)
    platforms = [ManualPlatform(g) for _ in range(4)]
    results = await asyncio.gather(
        *(p.create_slice(f"race-{i}", g) for i, p in enumerate(platforms)), return_exceptions=True
    )
    won = [r for r in results if not isinstance(r, BaseException)]
    assert 2 == len(won) and all(isinstance(r, QuotaExhausted) for r in results if r not in won)
    assert sorted(sshd.hosts) == sorted(r.hosts[0].address for r in won)
    for r in won:
        await platforms[0].terminate(r.slice_id)


async def test_multi_host_slice_and_a_full_pool_claims_nothing(sshd: Sshd) -> None:
    """A 2-host slice takes both hosts with indices 0 and 1; a slice that cannot get all its hosts keeps none."""
    g1, g2 = group(sshd, hosts_per_slice=1), group(sshd, hosts_per_slice=2)
    platform = ManualPlatform(g2)
    one = await platform.create_slice("one", g1)
    with pytest.raises(QuotaExhausted):
        await platform.create_slice("two", g2)
    assert ["one"] == [s.slice_id for s in await platform.list_slices({})]  # the half-claim was released
    await platform.terminate("one")
    two = await platform.create_slice("two", g2)
    assert [0, 1] == [h.index for h in two.hosts] and ["two-0", "two-1"] == [h.worker_id for h in two.hosts]
    assert one.hosts[0].address in {h.address for h in two.hosts}
    await platform.terminate("two")


async def test_slices_found_by_label_after_restart(sshd: Sshd) -> None:
    """A new ManualPlatform object (a restarted controller) finds the slices from the hosts' claims, by label."""
    g, other = group(sshd), group(sshd, name="other-pool")
    await ManualPlatform(g).create_slice("kept", g)
    await ManualPlatform(other).create_slice("theirs", other)
    restarted = ManualPlatform(g)
    found = await restarted.list_slices({"iris-scale-group": "ssh-pool"})
    assert ["kept"] == [s.slice_id for s in found]
    assert slice_labels("ssh-pool", "kept") == found[0].labels
    assert {"kept", "theirs"} == {s.slice_id for s in await restarted.list_slices({"iris-managed": "true"})}
    described = await restarted.describe("kept")
    assert described is not None and "claimed" == described.hosts[0].state
    await restarted.terminate("kept")
    await restarted.terminate("theirs")


async def test_unreachable_host_is_not_free(sshd: Sshd, tmp_path: Path) -> None:
    """A host that does not answer is never claimed, and the quota error says it was unreachable."""
    from tests.sshd import free_port

    g = group(sshd, hosts=[f"127.0.0.1:{free_port()}"])
    with pytest.raises(QuotaExhausted, match="0 of 1 free \\(1 unreachable\\)"):
        await ManualPlatform(g).create_slice("nowhere", g)
    with pytest.raises(SshError, match=r"cannot tell the state of slice nowhere: .*refused"):
        await ManualPlatform(g).describe("nowhere")  # unknown, not "gone": the host may hold it


def test_settings_errors_name_the_field() -> None:
    """The manual block rejects unknown keys and malformed hosts with one line naming the field."""
    with pytest.raises(ValueError, match=r"^manual\.hostz: unknown key"):
        parse_settings({"hosts": ["a"], "hostz": 1})
    with pytest.raises(ValueError, match=r"^manual\.hosts: hosts\[1\]: port must be 1\.\.65535 in 'b:notaport'"):
        parse_settings({"hosts": ["a", "b:notaport"]})
    with pytest.raises(ValueError, match=r"^manual\.hosts: hosts\[0\]: .*the user is set apart, as `user`"):
        parse_settings({"hosts": ["root@a"]})
    with pytest.raises(ValueError, match=r"^manual\.hosts: hosts\[0\]: 'fe80::1:22x' .* needs brackets"):
        parse_settings({"hosts": ["fe80::1:22x"]})
    with pytest.raises(ValueError, match=r"^manual\.hosts: Field required"):
        parse_settings({})
    assert ["10.0.0.5", "10.0.0.6:2222"] == parse_settings(
        {
            "hosts": ["10.0.0.5", "10.0.0.6:2222"],
            "user": "root",
            "identity_file": "~/.ssh/iris_ed25519",
            "known_hosts": None,
            "worker_command": None,
        }
    ).hosts


def test_hosts_as_ssh_takes_them() -> None:
    """Names, IPv4 and bracketed IPv6 addresses, each with or without a port, are accepted as written."""
    hosts = ["localhost", "localhost:2222", "worker-3.example.com:22", "10.0.0.6", "[::1]:2222", "[fe80::1]", "::1"]
    assert hosts == parse_settings({"hosts": hosts}).hosts


async def test_host_names_are_reached_by_name(sshd: Sshd, iris_home: Path) -> None:
    """`localhost:PORT` beside `127.0.0.1:PORT`: a 2-host slice is claimed, described and freed over both."""
    named = [f"localhost:{sshd.ports[0]}", f"127.0.0.1:{sshd.ports[1]}"]
    g = group(sshd, hosts=named, hosts_per_slice=2)
    platform = ManualPlatform(g)
    info = await platform.create_slice("named", g)
    assert (PlatformState.READY, named) == (info.state, [h.address for h in info.hosts])
    described = await platform.describe("named")
    assert described is not None and named == [h.address for h in described.hosts]
    known = (iris_home / "known_hosts").read_text().splitlines()
    assert {f"[localhost]:{sshd.ports[0]}", f"[127.0.0.1]:{sshd.ports[1]}"} == {line.split()[0] for line in known}
    await platform.terminate("named")
    assert [] == await platform.list_slices({})


async def test_worker_command_and_env_reach_the_agent(sshd: Sshd) -> None:
    """The agent is `worker_command` with Iris's arguments; it sees the non-interactive session's environment,
    the control plane's address, and the block's `env` over both."""
    from activities.contracts.fleet import ControlPlaneAddress
    from activities.platforms.remote_agent import host_key

    record = 'env > "$PWD/agent-env"; echo "$@" > "$PWD/agent-argv"; sleep 60'
    g = group(sshd, hosts=sshd.hosts[:1], worker_command=f"sh -c '{record}' agent",
              env={"IRIS_EXTRA": "two words", "IRIS_STORE": "file:///as/the/host/sees/it"})  # fmt: skip
    platform = ManualPlatform(g)
    await platform.create_slice("env", g)
    try:
        await platform.bootstrap("env", g, ControlPlaneAddress("127.0.0.1:7233", "default", "file:///store"))
        host_dir = sshd.remote_home / "manual" / host_key(sshd.hosts[0])
        env = dict(line.split("=", 1) for line in (host_dir / "agent-env").read_text().splitlines() if "=" in line)
        argv = (host_dir / "agent-argv").read_text().split()
    finally:
        await platform.terminate("env")
    assert ("two words", "file:///as/the/host/sees/it", "127.0.0.1:7233") == (
        env["IRIS_EXTRA"], env["IRIS_STORE"], env["IRIS_TEMPORAL_ADDRESS"])  # fmt: skip
    assert str(sshd.remote_home) == env["HOME"]  # the session's own environment is there too
    assert ["--worker-id", "env-0"] == argv[:2]


def test_env_names_are_checked() -> None:
    """An `env` key a shell cannot export is refused, naming the field."""
    with pytest.raises(ValueError, match=r"^manual\.env: .*'BAD-NAME' is not an environment variable name"):
        parse_settings({"hosts": ["a"], "env": {"BAD-NAME": "x"}})


async def test_hosts_that_refuse_the_key_are_a_refusal_not_a_busy_pool(sshd: Sshd, tmp_path: Path) -> None:
    """Every host rejecting the configured key is PlatformRefused (fix the config), naming the hosts; a pool
    whose hosts are merely taken stays QuotaExhausted."""
    from activities.platforms.base import PlatformRefused
    from tests.sshd import keygen

    stranger = tmp_path / "stranger"
    keygen(stranger)
    g = group(sshd, identity_file=str(stranger))
    refused = r"needs 1 hosts, 2 refused us: ssh \S+@127\.0\.0\.1:\d+: permission denied"
    with pytest.raises(PlatformRefused, match=refused):
        await ManualPlatform(g).create_slice("refused", g)
