"""Every run a bench produced, replayed against the current workflow code (not only quiet runs').

A chaos or scale run drives the workflows through controller kills, cold caches, queries and signal floods:
the histories that come out are the ones most likely to show a decision that depends on something replay
does not see (docs/reliability.md, "Replays"). Each run of the chosen types, closed runs included, is
fetched and replayed as a controller runs it (every workflow, the payload guard); what fails is listed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

from iris.controller.control_plane import controller_replayer

DEFAULT_TYPES = ("SchedulerWorkflow", "JobWorkflow", "AutoscalerWorkflow")


@dataclass
class ReplayReport:
    replayed: int = 0
    failures: list[str] = field(default_factory=list)


async def replay_all(client: Client, types: Sequence[str] = DEFAULT_TYPES, limit: int = 400) -> ReplayReport:
    """Replay up to `limit` runs of each type in `types` (newest first); a run with no completed task is skipped."""
    report = ReplayReport()
    replayer = controller_replayer()
    with _workflow_logs_quiet():
        for kind in types:
            await _replay_kind(client, replayer, kind, limit, report)
    return report


@contextlib.contextmanager
def _workflow_logs_quiet() -> Iterator[None]:
    """The Replayer runs a history's last workflow task as new, so a workflow's warnings in it (e.g. every worker
    "lost" as a bench stops its agents) were printed again, one line per worker, after the bench's figures."""
    logger = logging.getLogger("temporalio.workflow")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


async def _replay_kind(client: Client, replayer: Replayer, kind: str, limit: int, report: ReplayReport) -> None:
    """Replay the runs of one workflow type into `report`."""
    seen = 0
    async for wf in client.list_workflows(f"WorkflowType='{kind}'"):
        if seen >= limit:
            break
        seen += 1
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        if not any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in history.events):
            continue
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        report.replayed += 1
        if result.replay_failure is not None:
            report.failures.append(f"{kind} {wf.id} run {wf.run_id}: {result.replay_failure}")


def replay_all_sync(address: str, namespace: str = "default") -> ReplayReport:
    """`replay_all` from synchronous code (the chaos bench), with a client of its own."""

    async def go() -> ReplayReport:
        client = await Client.connect(address, namespace=namespace)
        return await replay_all(client)

    return asyncio.run(go())
