"""A workflow that reads the wall clock: the sandbox Iris runs its workflows in must stop it."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow


@workflow.defn(name="IrisSandboxProbe")
class ClockReadingWorkflow:
    @workflow.run
    async def run(self) -> str:
        return datetime.now().isoformat()  # non-deterministic: replay would see another time
