"""Starting and stopping a worker agent on a host reached over SSH (manual hosts, TPU VMs).

The agent runs detached (`setsid nohup`, stdio to a log file) so it outlives the SSH
session; its process id (also its process group id) is in a pid file. Each host's
files live in one directory under the remote user's Iris home,
`${IRIS_HOME:-$HOME/.iris}/<kind>/<host key>/`. A pid counts as our agent only while
its command line names our worker id, so a stale pid file after a reboot never lets
us signal an unrelated process.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Annotated

from pydantic import AfterValidator

from activities.contracts.fleet import AttributeValue, ControlPlaneAddress, ScaleGroupSpec
from activities.platforms.ssh import SshError, Transport
from scheduler.attributes import value_text

DEFAULT_WORKER_COMMAND = "iris worker serve"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_env_names(env: dict[str, str]) -> dict[str, str]:
    bad = [name for name in env if not _ENV_NAME.match(name)]
    if bad:
        raise ValueError(f"{bad[0]!r} is not an environment variable name")
    return env


# A config block's `env:` for the agent: names a shell can export, string values.
AgentEnv = Annotated[dict[str, str], AfterValidator(_check_env_names)]
STOP_GRACE_SECONDS = 10

# shell: is pid $1 alive (not a zombie) and running the agent whose command line holds "--worker-id $2"?
_ALIVE = r"""
alive() {
  if [ -r "/proc/$1/cmdline" ]; then
    s=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ -n "$s" ] && [ "$s" != Z ] && [ "$s" != X ] || return 1
    tr '\0' ' ' < "/proc/$1/cmdline" | grep -qF -- "--worker-id $2 "
  else
    kill -0 "$1" 2>/dev/null
  fi
}
"""


def host_key(address: str) -> str:
    """A file-name-safe key for a host address ("10.0.0.6:2222" -> "10.0.0.6_2222")."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", address)


def host_dir(kind: str, address: str) -> str:
    """The shell expression of a host's state directory on the remote side."""
    return f'"${{IRIS_HOME:-$HOME/.iris}}/{kind}/{host_key(address)}"'


def agent_argv(
    worker_id: str, attributes: Mapping[str, AttributeValue], group: ScaleGroupSpec, control: ControlPlaneAddress
) -> list[str]:
    """The `iris worker serve` arguments for one host of a slice."""
    argv = ["--worker-id", worker_id, "--runtime", group.runtime,
            "--cpu", f"{group.cpu_millis}m", "--memory", str(group.memory_bytes),
            "--temporal", control.temporal_address, "--store", control.store_url]
    if group.image:
        argv += ["--default-image", group.image]
    if group.gpus:
        argv += ["--gpus", str(group.gpus)]
    if group.tpus:
        argv += ["--tpus", str(group.tpus)]
    for key, value in attributes.items():
        argv += ["--attribute", f"{key}={value_text(value)}"]
    return argv


def start_script(
    directory: str,
    worker_command: str,
    argv: list[str],
    control: ControlPlaneAddress,
    guard: str = "",
    env: Mapping[str, str] | None = None,
) -> str:
    """Start the agent unless it already runs (prints `running PID` or `started PID`).

    `guard` is shell that must succeed first (e.g. "this host is still claimed by the slice").
    The agent gets the non-interactive SSH session's environment, the control plane's address, and
    then `env` (the config block's own, which wins: e.g. PATH, or an address the host sees differently).
    The agent must survive its first second, else the script fails with the log's last lines.
    """
    worker_id = argv[argv.index("--worker-id") + 1]
    env = {"IRIS_TEMPORAL_ADDRESS": control.temporal_address, "IRIS_TEMPORAL_NAMESPACE": control.namespace,
           "IRIS_STORE": control.store_url, **control.extra_env, **(env or {})}
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    wid = shlex.quote(worker_id)
    command = f"{worker_command} {shlex.join(argv)}"
    return f"""{_ALIVE}
d={directory}; mkdir -p "$d"; pidf="$d/agent.pid"
if [ -f "$pidf" ] && alive "$(cat "$pidf")" {wid}; then echo "running $(cat "$pidf")"; exit 0; fi
{guard}
cd "$d" || exit 1
{exports}
echo "--- $(date -u) starting agent {wid}" >> "$d/agent.log"
setsid nohup {command} >> "$d/agent.log" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$pidf"
sleep 1
if alive "$pid" {wid}; then echo "started $pid"; exit 0; fi
rm -f "$pidf"
echo "agent exited at once: $(tail -n 3 "$d/agent.log" | tr '\\n' ' ')" >&2
exit 5
"""


def stop_script(directory: str, worker_id: str, grace_seconds: int = STOP_GRACE_SECONDS) -> str:
    """Stop the agent: TERM to its process group, KILL after `grace_seconds`; prints `stopped PID` or `absent`."""
    wid = shlex.quote(worker_id)
    return f"""{_ALIVE}
d={directory}; pidf="$d/agent.pid"
[ -f "$pidf" ] || {{ echo absent; exit 0; }}
pid=$(cat "$pidf")
if alive "$pid" {wid}; then
  kill -TERM -"$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  i=0
  while alive "$pid" {wid} && [ $i -lt {grace_seconds * 10} ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL -"$pid" 2>/dev/null
  i=0
  while alive "$pid" {wid} && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  rm -f "$pidf"; echo "stopped $pid"
else
  rm -f "$pidf"; echo absent
fi
"""


async def run_checked(transport: Transport, script: str, what: str, timeout: float = 120.0) -> str:
    """Run a script; its stdout, or an SshError whose one line says what failed and why."""
    result = await transport.run(script, timeout=timeout)
    if not result.ok:
        label = getattr(getattr(transport, "target", None), "label", "host")
        raise SshError(f"ssh {label}: {what} failed: {result.last_line()}")
    return result.stdout
