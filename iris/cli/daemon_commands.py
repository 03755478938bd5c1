"""`iris worker serve` and `iris controller serve`: the long-running processes, started by operators.

Why a module of their own: the daemons' options and start-up checks are long and read apart from
the interactive commands; iris.cli.main registers them on its `worker` and `controller` groups. Registering
them imports this module for every `iris` command: asyncio and structlog are imported when a daemon runs.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer

from activities.contracts import DEFAULT_PORT_RANGE
from iris.cli.common import StoreOpt, TemporalOpt, configure_logging, fail, on_exit, source_name, temporal_settings
from iris.cli.parsing import parse_pair
from iris.cli.port_commands import parse_port_range
from iris.connection_env import ADDRESS_ENV
from iris.controller.sticky import DEFAULT_STICKY_TIMEOUT_SECONDS, MAX_STICKY_TIMEOUT_SECONDS
from iris.units import parse_cpu, parse_memory
from scheduler.attributes import value_from_text
from worker_agent.leases.lease_settings import (
    DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
    DEFAULT_LEASE_MARGIN_SECONDS,
    DEFAULT_LEASE_SECONDS,
    LeaseSettings,
)

HealthPortOpt = Annotated[
    int | None,
    typer.Option("--health-port", envvar="IRIS_HEALTH_PORT", min=0, max=65_535, help="serve /health and /metrics here"),
]
HealthHostOpt = Annotated[
    str, typer.Option("--health-host", envvar="IRIS_HEALTH_HOST", help="address the health port listens on")
]


EXIT_GRACE_SECONDS = 5.0
"""How long a daemon that was told to stop waits for threads still busy before it leaves anyway."""


def run_daemon(main: Coroutine[Any, Any, None], grace: float = EXIT_GRACE_SECONDS) -> None:
    """`asyncio.run(main)`, except that the threads still busy when `main` returns get `grace` seconds, not forever.

    `asyncio.run` joins every `asyncio.to_thread` call before it returns; one that waits on something slow (a local
    slice's terminate waits up to 15 s for its hosts' processes) would hold a SIGTERM'd daemon that long. The CLI
    leaves by `os._exit` (iris.cli.error_lines.exit_now), so nothing joins what is left behind; the work it did
    is an activity the next controller runs again.
    """
    import asyncio

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main)
    finally:
        try:
            loop.run_until_complete(_wind_down(grace))
        finally:
            asyncio.set_event_loop(None)
            loop.close()


async def _wind_down(grace: float) -> None:
    """What `asyncio.run` does after its main coroutine, with the wait for busy threads bounded."""
    import asyncio

    import structlog

    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    loop = asyncio.get_running_loop()
    await loop.shutdown_asyncgens()
    _, pending = await asyncio.wait([asyncio.ensure_future(loop.shutdown_default_executor())], timeout=grace)
    if pending:
        busy = [t.name for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
        structlog.get_logger("iris.cli.daemons").warning("daemon_left_threads", threads=busy, grace_seconds=grace)


def worker_serve(
    worker_id: Annotated[str | None, typer.Option("--worker-id", help="default: the host name")] = None,
    runtime: Annotated[str, typer.Option(help="process | docker | containerd")] = "process",
    containerd_socket: Annotated[
        str, typer.Option(help="containerd's CRI socket (--runtime containerd)", envvar="CONTAINERD_ADDRESS")
    ] = "/run/containerd/containerd.sock",
    docker_host: Annotated[
        str | None, typer.Option(help="Docker engine URL (--runtime docker; default: DOCKER_HOST)")
    ] = None,
    default_image: Annotated[
        str | None, typer.Option(help="container image for jobs that name none (docker/containerd)")
    ] = None,
    task_dir: Annotated[
        Path | None,
        typer.Option(help="root of the tasks' own directories; with docker/containerd a path the engine's host sees"),
    ] = None,
    task_user: Annotated[
        str, typer.Option(help="user process tasks run as: 'auto' (nobody when the agent is root), '' (the agent's)")
    ] = "auto",
    attribute: Annotated[
        list[str] | None, typer.Option("--attribute", help="K=V (numbers and true/false are typed)")
    ] = None,
    cpu: Annotated[str | None, typer.Option(help="cores to offer (default: all)")] = None,
    memory: Annotated[str | None, typer.Option(help="memory to offer (default: all)")] = None,
    gpus: Annotated[int, typer.Option(help="GPUs to offer")] = 0,
    tpus: Annotated[int, typer.Option(help="TPU chips to offer")] = 0,
    address: Annotated[
        str | None,
        typer.Option(envvar="IRIS_WORKER_ADDRESS",
                     help="how other hosts reach this host's tasks (default: the IP its host name resolves to)"),
    ] = None,
    port_range: Annotated[
        str, typer.Option(envvar="IRIS_PORT_RANGE", help="START-END: ports the scheduler may give this host's tasks")
    ] = "{}-{}".format(*DEFAULT_PORT_RANGE),
    tpu_vm: Annotated[
        bool | None,
        typer.Option("--tpu-vm/--no-tpu-vm", envvar="IRIS_TPU_VM",
                     help="read tpu-name, tpu-worker-id, tpu-topology... from the GCE metadata server and watch "
                          "it for preemption and maintenance notices (default: when $GCE_METADATA_HOST is set); "
                          "--attribute wins over what it reads"),
    ] = None,
    notice_grace: Annotated[
        float,
        typer.Option(
            min=0,
            envvar="IRIS_NOTICE_GRACE",
            help="seconds at least between a preemption notice's SIGTERM and the SIGKILL (the cloud's "
            "notice window when longer)",
        ),
    ] = 30.0,
    lease: Annotated[
        float, typer.Option("--lease", envvar="IRIS_LEASE_SECONDS",
                            help="seconds a task outlives the agent's last heartbeat Temporal recorded")
    ] = DEFAULT_LEASE_SECONDS,
    lease_margin: Annotated[
        float, typer.Option("--lease-margin", envvar="IRIS_LEASE_MARGIN_SECONDS",
                            help="seconds a lost task's next attempt waits beyond the lease")
    ] = DEFAULT_LEASE_MARGIN_SECONDS,
    heartbeat_timeout: Annotated[
        float, typer.Option("--heartbeat-timeout", envvar="IRIS_HEARTBEAT_TIMEOUT_SECONDS",
                            help="seconds without a heartbeat Temporal recorded before a task here is lost "
                                 "and runs elsewhere (2-600)")
    ] = DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
    kill_grace: Annotated[
        float | None,
        typer.Option("--kill-grace", min=0, max=300, envvar="IRIS_KILL_GRACE_SECONDS",
                     help="seconds between a killed task's SIGTERM and the SIGKILL of its process group, "
                          "0-300 (default 5)"),
    ] = None,
    registration_answer_wait: Annotated[
        float | None,
        typer.Option("--registration-answer-wait", min=1, envvar="IRIS_REGISTRATION_ANSWER_WAIT_SECONDS",
                     help="seconds a registration waits for the scheduler's answer before it is sent again "
                          "(default 20)"),
    ] = None,
    task_api: Annotated[
        str | None,
        typer.Option("--task-api", envvar="IRIS_TASK_API",
                     help="team mode: the Iris API (http://HOST:PORT) tasks reach with their job's token, "
                          "instead of this agent's Temporal settings"),
    ] = None,
    temporal: TemporalOpt = None,
    store: StoreOpt = None,
    health_port: HealthPortOpt = None,
    health_host: HealthHostOpt = "127.0.0.1",
) -> None:
    """The agent on one worker host: register, heartbeat, run tasks."""
    import asyncio
    import socket

    import structlog

    from iris.connection_env import is_api_url
    from worker_agent.agent import WorkerAgent, default_state_dir, default_task_dir
    from worker_agent.agent_config import AgentConfig
    from worker_agent.registration import RegistrationRefused
    from worker_agent.runtimes.base import RuntimeName
    from worker_agent.runtimes.select import RuntimeOptions, make_runtime, shared_task_dir
    from worker_agent.runtimes.select import task_user as resolve_task_user
    from worker_agent.runtimes.task_user_check import task_user_refusal
    from worker_agent.tpu_metadata import MetadataUnavailable, tpu_attributes_if_available

    configure_logging()
    try:
        attrs = {k: value_from_text(v) for k, v in (parse_pair(a, "--attribute") for a in attribute or [])}
        attrs = {**tpu_attributes_if_available(tpu_vm), **attrs}
        cpu_millis = parse_cpu(cpu, "--cpu") if cpu is not None else (os.cpu_count() or 1) * 1000
        memory_bytes = parse_memory(memory, "--memory") if memory is not None else _host_memory()
        ports = parse_port_range(port_range)
        leases = LeaseSettings(seconds=lease, margin_seconds=lease_margin, heartbeat_timeout=heartbeat_timeout)
    except (ValueError, MetadataUnavailable) as e:
        fail(str(e))
    wid = worker_id or socket.gethostname()
    namespace = None
    if temporal is not None and is_api_url(temporal):  # team mode: a worker credential asks the Iris API
        from iris.auth.remote import enroll_agent, resolve_token

        api = temporal
        control = enroll_agent(api, resolve_token(None), wid)
        for key, value in control.extra_env.items():  # as a bootstrapped agent is given them; the host's win
            os.environ.setdefault(key, value)
        temporal, namespace = control.temporal_address, control.namespace
        store, task_api = store or control.store_url, task_api or control.extra_env["IRIS_TASK_API"]
        structlog.get_logger("iris.cli.daemons").info("agent_enrolled", api=api, temporal=temporal,
                                                      namespace=namespace, worker_id=wid)  # fmt: skip
    settings = temporal_settings(temporal)
    if namespace is not None:
        settings = settings.model_copy(update={"namespace": namespace})
    if settings.address is None or store is None:
        raise fail("worker serve needs --temporal and --store (or IRIS_TEMPORAL_ADDRESS and IRIS_STORE)")
    from iris.controller.daemon_logs import ship_daemon_logs

    on_exit.append(ship_daemon_logs(store, "worker", wid).close)  # its own log to the store too
    from iris.client.task_connection import referenced_files, task_api_env, task_cluster_env

    state_dir = default_state_dir(wid)
    try:  # a task reaches this cluster: through the Iris API in team mode, else through Temporal as the agent does
        cluster_env = (task_api_env(task_api) if task_api else
                       task_cluster_env(settings, store, state_dir.parent / "secrets"))  # fmt: skip
    except ValueError as e:
        raise fail(str(e)) from None
    config = AgentConfig(
        worker_id=wid, store_url=store, cpu_millis=cpu_millis, memory_bytes=memory_bytes, gpus=gpus, tpus=tpus,
        attributes=attrs, runtime=runtime, state_dir=state_dir, default_image=default_image or "",
        address=address or "", port_range=ports, cluster_env=cluster_env, cluster_files=referenced_files(cluster_env),
        task_api=task_api or "",
        watch_notices=tpu_vm,  # a TPU VM's preemption/maintenance notices (auto: when $GCE_METADATA_HOST is set)
        notice_grace_seconds=notice_grace,
        lease=leases,
    )
    if registration_answer_wait is not None:  # else the agent's default
        config = dataclasses.replace(config, registration_answer_wait_seconds=registration_answer_wait)
    if kill_grace is not None:  # else the agent's default (KILL_GRACE_SECONDS)
        config = dataclasses.replace(config, kill_grace_seconds=kill_grace)
    options = RuntimeOptions(
        worker_id=wid, ledger_dir=config.state_dir, task_user=task_user, docker_host=docker_host,
        containerd_socket=containerd_socket, lease_seconds=leases.seconds,
    )
    try:
        config.task_dir = (
            task_dir.resolve() if task_dir is not None
            else shared_task_dir(runtime, options) or default_task_dir(config.state_dir)
        )  # fmt: skip
        # containerd writes a task's log where the agent must read it: beside the task directories.
        options = dataclasses.replace(options, cri_log_dir=config.task_dir / ".cri-logs")
        task_runtime = make_runtime(runtime, options)
    except ValueError as e:
        fail(str(e))

    async def check_task_user() -> None:
        """Process tasks run as another user: it must be able to run Python and read Iris (before registering)."""
        user = resolve_task_user(options.task_user) if runtime == RuntimeName.PROCESS else None
        if user is not None:
            refusal = await asyncio.to_thread(task_user_refusal, user)
            if refusal:
                raise TaskUserRefused(refusal)

    async def main() -> None:
        from temporalio.client import Client

        from iris.security.key_check import check_cluster_key

        if health_port is None:
            client = await settings.connect_until_up(timeout=None)
            await check_cluster_key(client)  # a wrong key refuses to start before anything is signalled
            await check_task_user()
            await WorkerAgent(client, config, task_runtime).serve()
            return
        from iris.controller import observability  # the health server (aiohttp): only when one is asked for

        metrics, sdk_port = observability.MetricsInterceptor(), observability.free_loopback_port()
        connected: list[Client] = []  # none while Temporal cannot be reached: /health answers 503 meanwhile

        async def checks() -> dict[str, bool]:
            return {
                "temporal_reachable": bool(connected) and await observability.temporal_reachable(connected[0]),
                "pollers_running": observability.heartbeat_fresh(metrics),
            }

        health = observability.HealthServer(health_port, checks, sdk_metrics_port=sdk_port, host=health_host)
        await health.start()  # before connecting: a port that refuses connections says nothing (it answered none)
        try:
            client = await settings.connect_until_up(
                timeout=None, interceptors=[metrics], runtime=observability.sdk_runtime(sdk_port)
            )
            connected.append(client)
            await check_cluster_key(client)
            await check_task_user()
            await WorkerAgent(client, config, task_runtime).serve()
        finally:
            await health.stop()

    from worker_agent.encryption import KeyMismatchError

    try:
        run_daemon(main())
    except RegistrationRefused as e:
        fail(f"worker {wid}: {e}", 3)
    except KeyMismatchError as e:
        fail(f"worker {wid} refuses to start: {e}", 3)
    except TaskUserRefused as e:
        fail(str(e))


class TaskUserRefused(Exception):  # noqa: N818 - a refusal, as RegistrationRefused
    """The task user cannot run tasks on this host (worker_agent.runtimes.task_user_check)."""


def _host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 4 * 1024**3


def controller_serve(
    temporal: TemporalOpt = None,
    store: StoreOpt = None,
    namespace: Annotated[
        str | None, typer.Option(envvar="IRIS_TEMPORAL_NAMESPACE", help="Temporal namespace (default: default)")
    ] = None,
    health_port: HealthPortOpt = None,
    health_host: HealthHostOpt = "127.0.0.1",
    config: Annotated[Path | None, typer.Option(help="cluster YAML whose scale_groups the autoscaler manages")] = None,
    dashboard_port: Annotated[
        int | None, typer.Option("--dashboard-port", envvar="IRIS_DASHBOARD_PORT", min=0, max=65_535,
                                 help="serve the web dashboard here")
    ] = None,
    dashboard_host: Annotated[
        str, typer.Option("--dashboard-host", envvar="IRIS_DASHBOARD_HOST", help="address the dashboard listens on")
    ] = "127.0.0.1",
    temporal_ui: Annotated[
        str | None,
        typer.Option("--temporal-ui", envvar="IRIS_TEMPORAL_UI", help="Temporal UI URL the dashboard links to"),
    ] = None,
    build_id: Annotated[
        str | None,
        typer.Option(envvar="IRIS_BUILD_ID", help="this build's version of the iris-control deployment "
                     "(default: a digest of the control plane's code; see docs/operators.md)"),
    ] = None,
    sticky_timeout: Annotated[
        float,
        typer.Option("--sticky-timeout", envvar="IRIS_STICKY_TIMEOUT_SECONDS",
                     help="seconds a workflow's next task waits for the controller that ran its last one "
                     "before any controller takes it (how long a killed controller's workflows stand still)"),
    ] = DEFAULT_STICKY_TIMEOUT_SECONDS,
) -> None:
    """The control-plane process: Iris workflows and control activities (and, with --dashboard-port, the dashboard)."""
    from iris.config.cluster_file import load_config
    from iris.connection import TemporalSettings
    from iris.controller.control_plane import autoscaler_config, serve

    configure_logging()
    try:
        names = {
            "address": source_name("temporal", temporal, "--temporal", ADDRESS_ENV),
            "namespace": source_name("namespace", namespace, "--namespace", "IRIS_TEMPORAL_NAMESPACE"),
        }
        settings = TemporalSettings.load(names=names, address=temporal, namespace=namespace)
        cluster_config = load_config(config) if config else None
        autoscaler_config(cluster_config)  # a bad platform block is a one-line error now, not in a workflow
    except ValueError as e:
        raise fail(str(e)) from None
    if settings.address is None or store is None:
        raise fail("controller serve needs --temporal and --store (or IRIS_TEMPORAL_ADDRESS and IRIS_STORE)")
    from iris.controller.daemon_logs import ship_daemon_logs

    if temporal_ui is not None and not temporal_ui.startswith(("http://", "https://")):
        raise fail(f"--temporal-ui must be an http:// or https:// URL, got {temporal_ui!r}")
    if dashboard_port is not None and not 0 <= dashboard_port <= 65535:
        raise fail(f"--dashboard-port must be a port number (0-65535), got {dashboard_port}")
    if not 0 < sticky_timeout <= MAX_STICKY_TIMEOUT_SECONDS:  # NaN too
        raise fail(f"--sticky-timeout must be > 0 and at most {MAX_STICKY_TIMEOUT_SECONDS:g} seconds, "
                   f"got {sticky_timeout}")  # fmt: skip
    on_exit.append(ship_daemon_logs(store, "controller", socket.gethostname()).close)  # its own log to the store
    run_daemon(serve(
        settings, store, health_port=health_port, health_host=health_host, config=cluster_config,
        dashboard_port=dashboard_port, dashboard_host=dashboard_host, temporal_ui_url=temporal_ui, build=build_id,
        sticky_timeout=sticky_timeout,
    ))  # fmt: skip
