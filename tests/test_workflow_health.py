"""A scheduler whose workflow task fails is said so at once: by `iris cluster status`, readiness and /health."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from temporalio import workflow
from temporalio.common import VersioningBehavior

from activities.contracts import SCHEDULER_WORKFLOW_ID
from iris.client.cluster_reads import QUERY_TIMEOUT
from iris.controller.workflow_health import workflow_task_failure
from iris.local.readiness import wait_until_ready
from tests.support import workflows_on_dev_server

ROOT = Path(__file__).resolve().parent.parent


@workflow.defn(name="StuckScheduler", versioning_behavior=VersioningBehavior.PINNED, sandboxed=False)
class StuckScheduler:
    """Fails every workflow task, as a scheduler that cannot replay its history does."""

    @workflow.run
    async def run(self) -> None:
        raise RuntimeError("[TMPRL1100] Nondeterminism error: made up for the test\nsecond line")


async def _failure_when_it_fails(client, timeout: float = 30.0) -> str:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        failure = await workflow_task_failure(client, SCHEDULER_WORKFLOW_ID)
        if failure is not None or time.monotonic() > deadline:
            return failure or ""
        await asyncio.sleep(0.2)


async def test_a_failing_scheduler_task_is_named_by_status_and_readiness(tmp_path: Path) -> None:
    """`iris cluster status` prints "scheduler workflow task failing: <error>" and exits 1; readiness gives up
    with the same line well before its timeout."""
    async with workflows_on_dev_server("stuck", [StuckScheduler], []) as (client, queue):
        await client.start_workflow("StuckScheduler", id=SCHEDULER_WORKFLOW_ID, task_queue=queue,
                                    task_timeout=timedelta(seconds=2))  # fmt: skip
        failure = await _failure_when_it_fails(client)
        assert failure.startswith("attempt ")
        assert failure.endswith("Nondeterminism error: made up for the test")

        address = client.service_client.config.target_host
        env = {**os.environ, "IRIS_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
        asked = time.monotonic()
        status = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "iris", "cluster", "status", "--temporal", address],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert 1 == status.returncode, status.stdout + status.stderr
        assert "scheduler workflow task failing: attempt" in status.stderr
        assert "Traceback" not in status.stderr
        # Said while the first try is still unanswered, not after it timed out (nor after a read's whole budget).
        assert time.monotonic() - asked < QUERY_TIMEOUT.total_seconds()

        started = time.monotonic()
        try:
            await wait_until_ready(address, expected_workers=1, timeout=60.0)
            raise AssertionError("readiness returned for a stuck scheduler")
        except RuntimeError as err:
            assert "scheduler workflow task failing" in str(err)
        assert time.monotonic() - started < 30.0
