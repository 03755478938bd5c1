"""`iris controller serve`: the control-plane process (workflows + control activities).

Stateless: every durable fact is in Temporal, so this process can be killed
and restarted at any time. On start it makes sure the Iris search attributes
exist and that the singleton scheduler workflow runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import structlog
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.converter import DataConverter
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.autoscaling import autoscale_plan, known_slices, start_slice_workflow
from activities.contracts import (
    AUTOSCALER_KIND,
    AUTOSCALER_WORKFLOW_ID,
    CONFIGURE_AUTOSCALER,
    CONFIGURE_SHARING,
    CONTROL_TASK_QUEUE,
    JOB_STATE_ATTRIBUTE,
    JOB_USER_ATTRIBUTE,
    KIND_ATTRIBUTE,
    REGISTRAR_KIND,
    REGISTRAR_WORKFLOW_ID,
    SCHEDULER_KIND,
    SCHEDULER_WORKFLOW_ID,
    SUMMARY_QUERY,
)
from activities.contracts.fleet import ControlPlaneAddress, ScaleGroupSpec
from activities.job_tree import kill_descendants
from activities.pass_pool import pass_process
from activities.platforms import platform_for
from activities.proto import cluster_pb2 as pb
from activities.recovery import find_lost_tasks, rebuild_scheduler
from activities.reservations import find_ended_jobs
from activities.scheduling import find_assignments_activity
from activities.signals import deliver_assignments, deliver_signals
from activities.slices import SliceActivities
from iris.auth.api import Gate
from iris.client.job_lookup import describe_job
from iris.config.cluster_file import ClusterConfig, ScaleGroupConfig
from iris.connection import TemporalSettings
from iris.controller import observability
from iris.controller.closed_run_guard import ClosedRunRunner
from iris.controller.gc_tuning import tune_for_controller
from iris.controller.lookahead_guard import LookaheadRunner
from iris.controller.payload_guard import GuardedRunner, PayloadGuard
from iris.controller.query_guard import query_guards
from iris.controller.sticky import DEFAULT_STICKY_TIMEOUT_SECONDS
from iris.controller.waits_worker import serve_waits
from iris.controller.workflow_health import workflow_task_failure
from iris.dashboard import Dashboard, DashboardServer, TemporalUI, default_ui_url
from iris.deploy.temporal_setup import ensure_search_attributes
from iris.deploy.worker_versioning import build_id, deployment_config, promote
from iris.security import codec
from iris.types import JobState
from workflows.fleet.autoscaler_state import AutoscalerConfig, ScaleGroup
from workflows.fleet.autoscaler_workflow import AutoscalerWorkflow
from workflows.fleet.registrar_workflow import RegistrarWorkflow
from workflows.registry import ALL_WORKFLOWS
from workflows.scheduler.scheduler_workflow import SchedulerWorkflow
from workflows.scheduler.sharing_state import SharingSettings

log = structlog.get_logger("iris.controller.control_plane")
KIND = SearchAttributeKey.for_keyword(KIND_ATTRIBUTE)


async def start_singleton(
    client: Client, run: Any, workflow_id: str, kind: str, summary: str, **options: Any
) -> WorkflowHandle[Any, Any]:
    """Start one of the control plane's singletons on the control queue, or find the running one (its handle)."""
    return await client.start_workflow(
        run,
        None,
        id=workflow_id,
        task_queue=CONTROL_TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        search_attributes=TypedSearchAttributes([SearchAttributePair(KIND, kind)]),
        static_summary=summary,
        **options,
    )


async def ensure_scheduler(client: Client, store_url: str, sharing: SharingSettings | None = None) -> None:
    handle = await start_singleton(
        client, SchedulerWorkflow.run, SCHEDULER_WORKFLOW_ID, SCHEDULER_KIND, "Iris scheduler (singleton)"
    )
    await handle.signal(SchedulerWorkflow.configure, store_url)
    if sharing is not None:  # a controller without a config leaves the settings as the last one set them
        await handle.signal(CONFIGURE_SHARING, sharing)
    await start_singleton(  # agents register through it (workflows/fleet/registrar_workflow.py)
        client, RegistrarWorkflow.run, REGISTRAR_WORKFLOW_ID, REGISTRAR_KIND,
        "Iris registrar: agents' registrations, handed on to the scheduler",
    )  # fmt: skip


def scale_group(cfg: ScaleGroupConfig) -> ScaleGroup:
    """A configured scale group as the autoscaler takes it; its platform settings are checked here.

    ValueError (naming the group and the field) when the platform is unknown or its block is wrong.
    """
    platform = getattr(cfg.platform, "value", cfg.platform)
    spec = ScaleGroupSpec(
        name=cfg.name, platform=str(platform), hosts_per_slice=cfg.hosts_per_slice, cpu_millis=cfg.cpu_millis,
        memory_bytes=cfg.memory_bytes, gpus=cfg.gpus, tpus=cfg.tpus, attributes=dict(cfg.attributes),
        runtime=str(getattr(cfg, "runtime", "process") or "process"), settings=dict(cfg.extra), image=cfg.image,
    )  # fmt: skip
    platform_for(spec)
    return ScaleGroup(spec, cfg.min_slices, cfg.max_slices, cfg.scale_up_delay_seconds, cfg.scale_down_delay_seconds,
                      buffer_slices=cfg.buffer_slices)


def autoscaler_config(config: ClusterConfig | None) -> AutoscalerConfig:
    if config is None:
        return AutoscalerConfig()
    return AutoscalerConfig(
        groups=[scale_group(g) for g in config.scale_groups],
        scan_interval_seconds=config.scan_interval_seconds,
        backoff_seconds=config.backoff_seconds,
        slice_heartbeat_seconds=config.slice_heartbeat_timeout_seconds,
    )


async def ensure_autoscaler(client: Client, config: AutoscalerConfig | None) -> None:
    """Start the singleton autoscaler if needed and hand it this controller's scale groups.

    With several controllers, the last one to start with a config configures it: give them one config file.
    One started without a config (None) leaves a running autoscaler's groups as they are (it took them all
    away, and their idle slices were never scaled down); it configures none only for an autoscaler it starts.
    """
    if config is None:
        try:
            desc = await client.get_workflow_handle(AUTOSCALER_WORKFLOW_ID).describe()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        else:
            if desc.status == WorkflowExecutionStatus.RUNNING:
                return
        config = AutoscalerConfig()
    await start_singleton(
        client, AutoscalerWorkflow.run, AUTOSCALER_WORKFLOW_ID, AUTOSCALER_KIND, "Iris autoscaler (singleton)",
        start_signal=CONFIGURE_AUTOSCALER, start_signal_args=[config],
    )  # fmt: skip


# Modules the sandbox shares between workflow runs instead of re-importing them for each: only
# pure ones (the scheduler, generated protos, leaf contract and state modules). Every module that
# defines a workflow is re-imported inside the sandbox, so a workflow that reads the clock, the
# filesystem or a random source fails its workflow task instead of passing unnoticed.
SANDBOX_PASSTHROUGH = (
    "scheduler",
    "activities.contracts",
    "activities.proto",
    "workflows.messages",
    "workflows.states",
    "workflows.tasks.task_lifecycle",
    "workflows.jobs.job_lifecycle",
    "workflows.fleet.worker_lifecycle",
    "workflows.scheduler.scheduler_state",
    "workflows.scheduler.sharing_state",
    "workflows.fleet.slice_lifecycle",
)


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox every Iris workflow runs in, passing through only SANDBOX_PASSTHROUGH."""
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
    return SandboxedWorkflowRunner(restrictions=restrictions)


def controller_runner() -> WorkflowRunner:
    """What a controller's workflow worker runs workflows in: the sandbox, with the signals it drops recorded
    (payload_guard), no query's look-ahead let through (lookahead_guard) and no scheduler run replayed for a
    query after it continued as new (closed_run_guard)."""
    return GuardedRunner(ClosedRunRunner(LookaheadRunner(workflow_runner()), [SchedulerWorkflow.__name__]))


def controller_replayer(
    workflows: Sequence[type] = ALL_WORKFLOWS, data_converter: DataConverter | None = None
) -> Replayer:
    """A Replayer that runs `workflows` as `control_worker` does: the same sandbox passthrough and guard,
    and Iris's payload converter (the process's codec key unless `data_converter` is given).

    The SDK's own converter decodes a message through its generic type hints: replaying a scheduler run
    at 30,000 workers, one task of 159 enqueue batches took it past the 2 s deadlock detector, where the
    controller, which decodes them by plan, had taken well under a second. A replay checks the code as it runs.
    """
    return Replayer(
        workflows=list(workflows),
        interceptors=[PayloadGuard()],
        workflow_runner=GuardedRunner(workflow_runner()),
        data_converter=data_converter or codec.data_converter(codec.load_key()),
    )


def control_worker(
    client: Client, executor: concurrent.futures.Executor, control: ControlPlaneAddress, build: str,
    sticky_timeout: float = DEFAULT_STICKY_TIMEOUT_SECONDS,
) -> Worker:  # fmt: skip
    """The control plane's Temporal worker: every Iris workflow and control activity, as version `build`."""
    return Worker(
        client,
        task_queue=CONTROL_TASK_QUEUE,
        workflows=ALL_WORKFLOWS,
        activities=[
            find_assignments_activity, deliver_signals, deliver_assignments, autoscale_plan, start_slice_workflow,
            known_slices, rebuild_scheduler, find_lost_tasks, kill_descendants, find_ended_jobs,
            *SliceActivities(control).all(),
        ],
        activity_executor=executor,
        max_concurrent_workflow_tasks=200,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=sticky_timeout),
        workflow_runner=controller_runner(),
        # An unreadable signal is dropped and recorded, never a failed task; the suite checks every query.
        interceptors=[PayloadGuard(), *query_guards()],
        deployment_config=deployment_config(build),
    )


async def serve(
    settings: TemporalSettings,
    store_url: str,
    health_port: int | None = None,
    health_host: str = "127.0.0.1",
    config: ClusterConfig | None = None,
    dashboard_port: int | None = None,
    dashboard_host: str = "127.0.0.1",
    temporal_ui_url: str | None = None,
    build: str | None = None,
    sticky_timeout: float = DEFAULT_STICKY_TIMEOUT_SECONDS,
) -> None:
    """Serve until SIGTERM/SIGINT; a failed Temporal worker is replaced instead of ending the process.

    With `health_port`, `/health` and `/metrics` are served there (see iris.controller.observability); with
    `dashboard_port`, the web dashboard (see iris.dashboard), linking to the Temporal UI at
    `temporal_ui_url` (default: the dev server's, the Temporal port + 1000).
    `config`'s scale groups go to the autoscaler (ValueError at once if one is invalid).
    `build` names this controller's version of the deployment (see iris.deploy.worker_versioning).
    `sticky_timeout`: see iris.controller.sticky (`--sticky-timeout`).
    """
    scaling = autoscaler_config(config) if config is not None else None  # None: leave the autoscaler's groups
    tune_for_controller()
    probe = ControllerProbe()
    health = None
    if health_port is None:
        client = await settings.connect_until_up()
    else:
        sdk_port = observability.free_loopback_port()
        health = observability.HealthServer(
            health_port, probe.checks, probe.refresh, sdk_metrics_port=sdk_port, host=health_host
        )
        await health.start()  # before connecting: /health answers 503 while Temporal cannot be reached
        try:
            client = await settings.connect_until_up(
                interceptors=[probe.interceptor], runtime=observability.sdk_runtime(sdk_port)
            )
        except BaseException:
            await health.stop()
            raise
        probe.client = client
    dashboard = None
    gate = await team_gate(client, config, store_url)  # team mode: the dashboard's port serves the Iris API (iris/auth)
    if gate is not None and dashboard_port is None:
        raise ValueError("auth: team mode serves the Iris API on the dashboard's port; give --dashboard-port")
    control = agent_address(settings, client.namespace, store_url, team=gate is not None)
    if gate is not None:  # the local platform's agents are this process's children: their tasks reach this API
        host = "127.0.0.1" if dashboard_host in ("0.0.0.0", "::", "") else dashboard_host
        os.environ.setdefault("IRIS_TASK_API", f"http://{host}:{dashboard_port}")
    if dashboard_port is not None:
        ui = TemporalUI(temporal_ui_url or default_ui_url(str(settings.address)), client.namespace)
        pages = Dashboard(client, ui, store_url, gate=gate, control=control)
        dashboard = DashboardServer(pages, dashboard_port, dashboard_host)
        await dashboard.start()
    try:
        await _serve(client, settings, store_url, control, probe, scaling, build_id(build),
                     config.sharing if config is not None else None, team=gate is not None,
                     sticky_timeout=sticky_timeout)  # fmt: skip
    finally:
        if dashboard is not None:
            await dashboard.stop()
        if gate is not None:
            await gate.directory.close()
        if health is not None:
            await health.stop()


async def team_gate(client: Client, config: ClusterConfig | None, store_url: str) -> Gate | None:
    """In team mode (`auth: tokens`), the credential checks the Iris API and the dashboard share; else None.

    Its tasks' tokens are checked against the key in the store (made here if it has none: the agents
    read it to mint them, worker_agent/task_token.py).
    """
    if config is None or not config.auth.team:
        return None
    from iris.auth.store import Directory
    from iris.auth.verify import OidcVerifier, TaskTokenVerifier, TokenVerifier, Verifier, Verifiers
    from worker_agent.object_store import open_blob_store
    from worker_agent.task_token import ensure_key

    blobs = open_blob_store(store_url)
    await asyncio.to_thread(ensure_key, blobs)
    directory = Directory(client)
    tasks = TaskTokenVerifier(lambda: ensure_key(blobs), job_running(client), directory, config.auth.task_token_recheck)
    chain: list[Verifier] = [TokenVerifier(directory), tasks]
    oidc = None
    if config.auth.oidc is not None:
        oidc = OidcVerifier(config.auth.oidc.issuer, config.auth.oidc.audience, directory)
        chain.append(oidc)
    return Gate(Verifiers(tuple(chain)), directory, oidc, config.auth.oidc_client_secret())


def job_running(client: Client) -> Callable[[str], Awaitable[tuple[str, bool, float]]]:
    """(user, running, started) of a job, from one describe: its `IrisUser` (a child's is its root's), status
    and start time (epoch seconds)."""

    async def state(job_id: str) -> tuple[str, bool, float]:
        desc = await describe_job(client, job_id)
        user = desc.typed_search_attributes.get(SearchAttributeKey.for_keyword(JOB_USER_ATTRIBUTE)) or ""
        return user, desc.status == WorkflowExecutionStatus.RUNNING, desc.start_time.timestamp()

    return state


class ControllerProbe:
    """What `/health` and `/metrics` read: Temporal's answer, whether the control worker polls, job counts."""

    def __init__(self) -> None:
        self.interceptor = observability.MetricsInterceptor()
        self.client: Client | None = None
        self.polling = False

    async def checks(self) -> dict[str, bool]:
        reachable = self.client is not None and await observability.temporal_reachable(self.client)
        checks = {"temporal_reachable": reachable, "pollers_running": self.polling}
        if reachable and self.client is not None:
            checks["scheduler_workflow_task_ok"] = await self._scheduler_ok(self.client)
        return checks

    async def _scheduler_ok(self, client: Client) -> bool:
        """False while the scheduler's workflow task fails: nothing is placed until someone acts."""
        try:
            failure = await asyncio.wait_for(workflow_task_failure(client, SCHEDULER_WORKFLOW_ID), 5.0)
        except Exception:  # not started yet, or Temporal busy: not this check's to report
            return True
        if failure:
            log.warning("scheduler_workflow_task_failing", error=failure)
        return failure is None

    async def refresh(self) -> None:
        """Jobs by state from visibility and the scheduler's queue, read at scrape time."""
        if self.client is None:
            return
        client = self.client
        states = [s.value for s in JobState]

        async def count(state: str) -> int:
            found = await client.count_workflows(f"WorkflowType='JobWorkflow' AND {JOB_STATE_ATTRIBUTE}='{state}'")
            return found.count

        for state, n in zip(states, await asyncio.gather(*(count(s) for s in states)), strict=True):
            observability.JOBS.labels(state).set(n)
        summary = await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).query(
            SUMMARY_QUERY, result_type=pb.ClusterSummary, rpc_timeout=timedelta(seconds=5)
        )
        observability.PENDING_TASKS.set(summary.pending_tasks)
        observability.PLACED_TASKS.set(summary.running_tasks)
        observability.WORKERS.labels("true").set(summary.healthy_workers)
        observability.WORKERS.labels("false").set(summary.total_workers - summary.healthy_workers)


def agent_address(settings: TemporalSettings, namespace: str, store_url: str, *, team: bool) -> ControlPlaneAddress:
    """What the agents this controller bootstraps are told: the Temporal frontend and the store, and in team
    mode the Iris API their tasks reach (`IRIS_TASK_API` as the operator gave it to the controller: an address
    the hosts of every platform reach; without it, only the local platform's agents get one, on loopback)."""
    api = os.environ.get("IRIS_TASK_API", "") if team else ""
    return ControlPlaneAddress(
        temporal_address=str(settings.address), namespace=namespace, store_url=store_url,
        extra_env={"IRIS_TASK_API": api} if api else {},
    )  # fmt: skip


async def _serve(
    client: Client, settings: TemporalSettings, store_url: str, control: ControlPlaneAddress, probe: ControllerProbe,
    scaling: AutoscalerConfig | None, build: str, sharing: SharingSettings | None = None, team: bool = False,
    sticky_timeout: float = DEFAULT_STICKY_TIMEOUT_SECONDS,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    waits = asyncio.create_task(serve_waits(client, stop))  # a job's dependencies (iris/controller/waits_worker.py)
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=4)
    with contextlib.ExitStack() as stack:
        # On the way out a sync activity still running (a scheduling pass) is left behind, not waited for: the
        # worker has cancelled it, and its activity is retried on the next controller.
        stack.callback(executor.shutdown, wait=False, cancel_futures=True)
        stack.enter_context(pass_process())
        ready = False
        while not stop.is_set():
            worker = control_worker(client, executor, control, build, sticky_timeout)
            running = asyncio.create_task(worker.run())
            try:
                if not ready:
                    for step in await ensure_search_attributes(client):
                        if step.outcome == "created":
                            log.info("search_attribute_added", step=str(step))
                        elif step.outcome == "failed":  # no admin rights: `iris temporal setup` is the operator's
                            log.warning("search_attribute_missing", step=str(step))
                    promotion = await promote(client, build)  # before any start: runs go to the current build
                    await ensure_scheduler(client, store_url, sharing)
                    await ensure_autoscaler(client, scaling)
                    if team:  # the users, roles and audit log of team mode (iris/auth/store.py)
                        from iris.auth.store import ensure_auth_workflow

                        await ensure_auth_workflow(client)
                    ready = True
                    log.info("controller_serving", **settings.describe(), store=store_url, build=build,
                             current_build=promotion.current)
                probe.polling = True
                stopping = asyncio.ensure_future(stop.wait())
                await asyncio.wait({stopping, running}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
            except RPCError as err:  # Temporal went away while we set up: try again
                log.warning("controller_setup_failed", error=str(err))
                await asyncio.sleep(1.0)
            finally:
                probe.polling = False
                if not running.done():
                    await worker.shutdown()
                with contextlib.suppress(BaseException):
                    await running
            if running.done() and not running.cancelled() and running.exception() is not None and not stop.is_set():
                log.error("control_worker_failed", error=str(running.exception()))
                await asyncio.sleep(1.0)
        log.info("controller_stopping")
    stop.set()
    await waits
