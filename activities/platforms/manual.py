"""`platform: manual`: a fixed list of hosts reached over SSH; a slice claims free hosts.

The claim lives on the host itself, not in the controller: a file
`${IRIS_HOME:-$HOME/.iris}/manual/<host key>/claim.json` naming the slice, its group and
the host's index in the slice, hard-linked into place so that two controllers (or a
retried activity) can never both hold one host. A restarted controller finds its
slices by reading the claims, which carry the slice's labels. Bootstrap starts
`iris worker serve` (or `worker_command`) detached over SSH; terminate stops it (TERM,
then KILL, of its process group) and then deletes the claim.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from activities.contracts.fleet import (
    ControlPlaneAddress,
    HostInfo,
    PlatformState,
    ScaleGroupSpec,
    SliceInfo,
    host_attributes,
    slice_labels,
    worker_id_for,
)
from activities.platforms import remote_agent
from activities.platforms.base import PlatformRefused, QuotaExhausted
from activities.platforms.ssh import SshError, SshRefusedError, SshTarget, SshTransport, parse_address

log = structlog.get_logger(__name__)

KIND = "manual"  # the remote state directory's name under the Iris home


class Settings(BaseModel):
    """The `manual:` block of a scale group."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hosts: list[str] = Field(description="the pool: `host`, `host:port`, `[IPv6]:port` (names as SSH takes them)")
    user: str | None = Field(default=None, description="SSH login user; default: the controller's user name")
    identity_file: str | None = Field(
        default=None, description="private key file; default: the keys asyncssh finds (`~/.ssh/id_*`, an agent)"
    )
    known_hosts: str | None = Field(
        default=None, description="trusted host keys (strict); default: accept-new into `$IRIS_HOME/known_hosts`"
    )
    worker_command: str | None = Field(
        default=None, description="the agent command before its flags; default: `iris worker serve` on PATH"
    )
    env: remote_agent.AgentEnv = Field(
        default={}, description="environment exported for the agent, after (and over) Iris's own variables"
    )

    @field_validator("hosts")
    @classmethod
    def _check_hosts(cls, hosts: list[str]) -> list[str]:
        if not hosts:
            raise ValueError("needs at least one host")
        for i, address in enumerate(hosts):
            try:
                parse_address(address)
            except ValueError as e:
                raise ValueError(f"hosts[{i}]: {e}") from None
        if len(set(hosts)) != len(hosts):
            raise ValueError("a host is listed twice")
        return hosts


def parse_settings(data: Mapping[str, Any], where: str = "manual") -> Settings:
    """Validate a `manual:` block; a ValueError whose one line names the field."""
    try:
        return Settings.model_validate(dict(data))
    except ValidationError as e:
        first = e.errors()[0]
        path = ".".join(str(p) for p in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = f"unknown key (allowed: {', '.join(Settings.model_fields)})"
        raise ValueError(f"{where}.{path}: {message}" if path else f"{where}: {message}") from None


@dataclass
class _HostStatus:
    """One host as read over SSH: its claim (empty when free) and whether an agent runs there."""

    address: str
    claim: dict[str, Any] = field(default_factory=dict)
    agent_pid: int | None = None
    error: str = ""  # set when the host could not be read
    refused: bool = False  # ... because it refused us for good (authentication, host key)

    @property
    def free(self) -> bool:
        return not self.error and not self.claim


class ManualPlatform:
    """Slices made of hosts from a fixed list; the hosts' own claim files are the durable record."""

    def __init__(self, group: ScaleGroupSpec) -> None:
        self.group = group
        self.settings = parse_settings(group.settings, f"scale group {group.name}: manual")
        s = self.settings
        self.worker_command = s.worker_command or remote_agent.DEFAULT_WORKER_COMMAND
        self._targets = {}
        for address in s.hosts:
            host, port = parse_address(address)
            self._targets[address] = SshTarget(
                host=host, port=port, user=s.user or getpass.getuser(),
                identity_file=Path(s.identity_file).expanduser() if s.identity_file else None,
                known_hosts=Path(s.known_hosts).expanduser() if s.known_hosts else None,
            )

    def transport(self, address: str) -> SshTransport:
        """A transport to one of the configured hosts."""
        return SshTransport(self._targets[address])

    # -- reading the hosts ----------------------------------------------------------------------------

    async def _status(self, address: str) -> _HostStatus:
        d = remote_agent.host_dir(KIND, address)
        script = f"""d={d}
if [ -f "$d/claim.json" ]; then head -n 1 "$d/claim.json"; else echo '{{}}'; fi
if [ -f "$d/agent.pid" ] && kill -0 "$(cat "$d/agent.pid")" 2>/dev/null; then cat "$d/agent.pid"; else echo -; fi
"""
        try:
            out = await remote_agent.run_checked(self.transport(address), script, "reading the claim", timeout=60)
            claim_line, pid_line = [*out.splitlines(), "", ""][:2]
            claim = json.loads(claim_line or "{}")
        except SshError as e:
            return _HostStatus(address, error=str(e), refused=isinstance(e, SshRefusedError))
        except json.JSONDecodeError:
            return _HostStatus(address, error=f"{address}: unreadable claim file: {claim_line[:80]!r}")
        return _HostStatus(address, claim, int(pid_line) if pid_line.strip().isdigit() else None)

    async def _statuses(self) -> list[_HostStatus]:
        return list(await asyncio.gather(*(self._status(a) for a in self.settings.hosts)))

    def _slices(self, statuses: list[_HostStatus]) -> dict[str, SliceInfo]:
        """Group the claims by slice; a slice that does not yet hold all its hosts is CREATING."""
        members: dict[str, list[_HostStatus]] = {}
        for status in statuses:
            if status.claim.get("slice_id"):
                members.setdefault(status.claim["slice_id"], []).append(status)
        slices = {}
        for slice_id, hosts in members.items():
            first = hosts[0].claim
            complete = len(hosts) >= int(first.get("hosts_per_slice", len(hosts)))
            infos = sorted(
                (HostInfo(index=int(h.claim["index"]), address=h.address,
                          worker_id=worker_id_for(slice_id, int(h.claim["index"])),
                          state="agent running" if h.agent_pid else "claimed")
                 for h in hosts),
                key=lambda h: h.index,
            )
            slices[slice_id] = SliceInfo(
                slice_id=slice_id, scale_group=str(first.get("scale_group", "")),
                state=PlatformState.READY if complete else PlatformState.CREATING,
                hosts=infos, labels=dict(first.get("labels", {})),
            )
        return slices

    # -- the Platform protocol --------------------------------------------------------------------------

    async def create_slice(self, slice_id: str, group: ScaleGroupSpec) -> SliceInfo:
        """Claim `hosts_per_slice` free hosts (keeping any this slice already holds); none left: QuotaExhausted."""
        statuses = await self._statuses()
        held = {int(s.claim["index"]) for s in statuses if s.claim.get("slice_id") == slice_id}
        wanted = [i for i in range(group.hosts_per_slice) if i not in held]
        free = [s.address for s in statuses if s.free]
        claimed: list[tuple[str, int]] = []
        for address in free:
            if not wanted:
                break
            if await self._claim(address, slice_id, group, wanted[0]):
                claimed.append((address, wanted.pop(0)))
        if wanted:
            await asyncio.gather(*(self._release(a, slice_id, i) for a, i in claimed))
            refused = [s for s in statuses if s.refused]
            if refused and len(free) + len(refused) >= group.hosts_per_slice:
                # the hosts that refused us are what is missing: a config problem, not a busy pool
                raise PlatformRefused(f"manual: slice {slice_id} needs {group.hosts_per_slice} hosts, "
                                      f"{len(refused)} refused us: {'; '.join(s.error for s in refused)}")  # fmt: skip
            unreachable = sum(1 for s in statuses if s.error)
            reason = (f"manual: slice {slice_id} needs {group.hosts_per_slice} hosts, "
                      f"{len(free)} of {len(statuses)} free")
            raise QuotaExhausted(reason + (f" ({unreachable} unreachable)" if unreachable else ""))
        info = (self._slices(await self._statuses())).get(slice_id)
        assert info is not None, "claims vanished right after they were made"
        log.info("manual_slice_claimed", slice_id=slice_id, hosts=[h.address for h in info.hosts])
        return info

    async def _claim(self, address: str, slice_id: str, group: ScaleGroupSpec, index: int) -> bool:
        """Atomically claim one host for (slice, index); False when another slice got there first."""
        claim = {"slice_id": slice_id, "scale_group": group.name, "index": index,
                 "hosts_per_slice": group.hosts_per_slice, "labels": slice_labels(group.name, slice_id),
                 "claimed_at": time.time()}
        body = shlex.quote(json.dumps(claim, separators=(",", ":"), sort_keys=True))
        script = f"""d={remote_agent.host_dir(KIND, address)}; mkdir -p "$d" || exit 1
tmp="$d/.claim.$$"; printf '%s\\n' {body} > "$tmp" || exit 1
if ln "$tmp" "$d/claim.json" 2>/dev/null; then rm -f "$tmp"; echo claimed
else rm -f "$tmp"; head -n 1 "$d/claim.json"; fi
"""
        out = (await remote_agent.run_checked(self.transport(address), script, "claiming the host")).strip()
        if out == "claimed":
            return True
        try:
            holder = json.loads(out)
        except json.JSONDecodeError:
            return False
        return bool(holder.get("slice_id") == slice_id and holder.get("index") == index)

    def _owner_guard(self, slice_id: str) -> str:
        """Shell that fails unless the host's claim names `slice_id`."""
        needle = shlex.quote(f'"slice_id":{json.dumps(slice_id)}')
        return (f'grep -qF {needle} "$d/claim.json" 2>/dev/null || '
                f'{{ echo "host is not claimed by slice {slice_id}" >&2; exit 4; }}')

    async def _release(self, address: str, slice_id: str, index: int) -> None:
        """Stop this slice's agent on the host, then delete the claim (only while the claim is this slice's)."""
        d = remote_agent.host_dir(KIND, address)
        stop = remote_agent.stop_script(d, worker_id_for(slice_id, index))
        free = f"""d={d}
[ -f "$d/claim.json" ] || exit 0
{self._owner_guard(slice_id).replace("exit 4", "exit 0")}
rm -f "$d/claim.json"
"""
        # one SSH session: the claim goes only once the agent is stopped
        script = f"(\n{stop}\n) && (\n{free}\n)"
        await remote_agent.run_checked(self.transport(address), script, "stopping the agent and freeing the host")

    async def describe(self, slice_id: str) -> SliceInfo | None:
        """The slice's hosts (address, worker id, agent running or not) from their claims; None if none holds it.

        When a host does not answer and the slice is not complete without it, the answer is
        unknown, not "gone": that is an SshError (the caller looks again later).
        """
        statuses = await self._statuses()
        info = self._slices(statuses).get(slice_id)
        unreachable = [s.error for s in statuses if s.error]
        if unreachable and (info is None or info.state != PlatformState.READY):
            raise SshError(f"manual: cannot tell the state of slice {slice_id}: {'; '.join(unreachable)}")
        return info

    async def bootstrap(self, slice_id: str, group: ScaleGroupSpec, control: ControlPlaneAddress) -> None:
        """Start the agent on every host of the slice; a host whose agent already runs is left alone."""
        info = await self.describe(slice_id)
        if info is None:
            raise SshError(f"manual: slice {slice_id} holds no hosts (terminated?)")
        if info.state != PlatformState.READY:
            raise SshError(f"manual: slice {slice_id} has {len(info.hosts)} of {group.hosts_per_slice} hosts")

        async def start(host: HostInfo) -> None:
            argv = remote_agent.agent_argv(host.worker_id, host_attributes(group, slice_id, host.index), group,
                                           control)
            script = remote_agent.start_script(remote_agent.host_dir(KIND, host.address), self.worker_command,
                                               argv, control, guard=self._owner_guard(slice_id),
                                               env=self.settings.env)  # fmt: skip
            out = await remote_agent.run_checked(self.transport(host.address), script, "starting the agent")
            log.info("manual_agent", slice_id=slice_id, host=host.address, worker_id=host.worker_id,
                     result=out.strip())

        await asyncio.gather(*(start(h) for h in info.hosts))

    async def list_slices(self, labels: Mapping[str, str]) -> list[SliceInfo]:
        """Every slice whose claims carry all of `labels`, read from the hosts that answer."""
        statuses = await self._statuses()
        for status in statuses:
            if status.error:
                log.warning("manual_host_unreachable", host=status.address, error=status.error)
        slices = self._slices(statuses).values()
        return [s for s in slices if all(s.labels.get(k) == v for k, v in labels.items())]

    async def terminate(self, slice_id: str) -> None:
        """Stop the slice's agents and free its hosts; an unreachable host that may hold it is an SshError."""
        statuses = await self._statuses()
        mine = [s for s in statuses if s.claim.get("slice_id") == slice_id]
        expected = int(mine[0].claim.get("hosts_per_slice", 0)) if mine else 0
        unreachable = [s.error for s in statuses if s.error]
        await asyncio.gather(*(self._release(s.address, slice_id, int(s.claim["index"])) for s in mine))
        if unreachable and (not mine or len(mine) < expected):
            raise SshError(f"manual: slice {slice_id}: freed {len(mine)} of {expected} hosts; "
                           + "; ".join(unreachable))
        log.info("manual_slice_freed", slice_id=slice_id, hosts=[s.address for s in mine])

