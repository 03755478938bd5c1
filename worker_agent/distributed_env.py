"""The environment of a task of a distributed job, and the endpoints it publishes.

One function builds every variable a distributed program reads (JAX's coordinator, TPU hosts,
named ports), from what the scheduler decided when it placed the task (`TaskNetwork`), so the
program runs `jax.distributed.initialize()` unchanged. Anything else a multi-host program needs
(e.g. multi-slice variables) belongs here too.
"""

from __future__ import annotations

import socket

from activities.contracts import RunTaskInput, TaskNetwork
from worker_agent.megascale import megascale_env


def host_address() -> str:
    """This host's address as other hosts see it: the IP its host name resolves to, unless that is a
    loopback address (Debian maps the name to 127.0.1.1), then the address of the interface of the
    default route; the host name when neither is known.

    An agent started with an explicit address (`iris worker serve --address`) does not ask.
    """
    name = socket.gethostname()
    try:
        resolved = socket.gethostbyname(name)
    except OSError:
        resolved = ""
    if resolved and not resolved.startswith("127."):
        return resolved
    try:
        # Connecting a UDP socket sends nothing: it only asks the kernel which interface it would use.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1 (RFC 5737): routed by default, never answered
            return str(probe.getsockname()[0])
    except OSError:
        return resolved or name


def distributed_env(inp: RunTaskInput) -> dict[str, str]:
    """The variables for this task (MEGASCALE_* too); none for a job of one task without ports."""
    net = inp.network
    env: dict[str, str] = {}
    if net is None:
        return env
    if inp.num_tasks > 1:
        env["JAX_NUM_PROCESSES"] = str(inp.num_tasks)
        env["JAX_PROCESS_ID"] = str(inp.task_index)
        if net.coordinator:
            env["JAX_COORDINATOR_ADDRESS"] = net.coordinator
    if net.slice_hosts:
        env["TPU_WORKER_HOSTNAMES"] = ",".join(net.slice_hosts)
        env["TPU_WORKER_ID"] = str(net.slice_host_index)
    env.update(megascale_env(inp.num_slices, inp.task_index, inp.num_tasks, net.megascale_coordinator))
    for name, port in net.ports.items():
        if "-" not in name:  # Iris's own ports (the coordinator's) are named so no variable can clash
            env[f"IRIS_PORT_{name.upper()}"] = str(port)
    return env


def endpoints(net: TaskNetwork | None) -> dict[str, str]:
    """Port name -> "host:port" of this task, published while it runs (`client.resolve`)."""
    if net is None:
        return {}
    return {name: f"{net.address}:{port}" for name, port in net.ports.items()}
