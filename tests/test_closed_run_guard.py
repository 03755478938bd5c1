"""A query that reaches a scheduler run after it continued as new is refused, not answered by replaying the run.

At 30,000 workers such a replay cost the controller 0.47-0.56 s of CPU beside the next run's first task
(iris/controller/closed_run_guard.py). Here a small workflow continues as new on a real dev server, and its
closed run is queried by its run id, as the server hands over a query that came before the run closed.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.worker import UnsandboxedWorkflowRunner, WorkflowRunner

from iris.controller.closed_run_guard import REMEMBERED, ClosedRunRunner, ClosedRuns
from iris.controller.control_plane import controller_runner
from iris.controller.lookahead_guard import LookaheadRunner
from iris.query_retry import CLOSED_RUN_REFUSED
from tests.support import workflows_on_dev_server

RUN_CODE_STARTS = [0]
"""How many times a ContinuesOnce run's code started, a replay from the first event included."""


@workflow.defn(name="ContinuesOnce", sandboxed=False)
class ContinuesOnce:
    """Its first run continues as new when signalled; every run answers which generation it is."""

    def __init__(self) -> None:
        self._generation = -1
        self._go = False

    @workflow.run
    async def run(self, generation: int) -> None:
        RUN_CODE_STARTS[0] += 1
        self._generation = generation
        await workflow.wait_condition(lambda: self._go)
        if generation == 0:
            workflow.continue_as_new(1)
        await workflow.wait_condition(lambda: False)

    @workflow.signal
    def go(self) -> None:
        self._go = True

    @workflow.query
    def generation(self) -> int:
        return self._generation


async def _continued(client: Client, queue: str) -> tuple[WorkflowHandle, str]:
    """Start a ContinuesOnce, make it continue as new, wait for the new run to answer; the id's handle, the
    first run's id."""
    handle = await client.start_workflow(ContinuesOnce.run, 0, id=f"continues-{queue}", task_queue=queue)
    first = handle.result_run_id
    assert first is not None
    assert 0 == await handle.query(ContinuesOnce.generation)
    await handle.signal(ContinuesOnce.go)
    for _ in range(100):
        if 1 == await client.get_workflow_handle(handle.id).query(ContinuesOnce.generation):
            return client.get_workflow_handle(handle.id), first
        await asyncio.sleep(0.1)
    raise AssertionError("the workflow did not continue as new")


def _runner(guarded: bool) -> WorkflowRunner:
    """Runs ContinuesOnce (unsandboxed, so that it can count its starts) as a controller runs the scheduler."""
    inner = LookaheadRunner(UnsandboxedWorkflowRunner())
    return ClosedRunRunner(inner, ["ContinuesOnce"]) if guarded else inner


async def test_a_query_of_a_run_that_continued_as_new_is_refused_without_running_its_code() -> None:
    guarded = _runner(True)
    async with workflows_on_dev_server("closed", [ContinuesOnce], [], unsandboxed_runner=guarded) as (client, queue):
        current, first = await _continued(client, queue)
        starts = RUN_CODE_STARTS[0]
        bare = Client(client.service_client, namespace=client.namespace)  # no retry: the refusal is seen
        with pytest.raises(WorkflowQueryFailedError, match=CLOSED_RUN_REFUSED):
            await bare.get_workflow_handle(current.id, run_id=first).query(ContinuesOnce.generation)
        assert starts == RUN_CODE_STARTS[0]  # the closed run's code did not run again
        assert 1 == await current.query(ContinuesOnce.generation)  # the current run answers as before
        await current.terminate("test done")


async def test_without_the_guard_the_closed_run_is_replayed_to_answer() -> None:
    """What the guard spares: the SDK replays the closed run's history from its first event to answer."""
    plain = _runner(False)
    async with workflows_on_dev_server("replayed", [ContinuesOnce], [], unsandboxed_runner=plain) as (client, queue):
        current, first = await _continued(client, queue)
        starts = RUN_CODE_STARTS[0]
        assert 0 == await client.get_workflow_handle(current.id, run_id=first).query(ContinuesOnce.generation)
        assert starts + 1 == RUN_CODE_STARTS[0]
        await current.terminate("test done")


def test_the_controller_guards_the_scheduler() -> None:
    runner = controller_runner()
    guards = []
    while runner is not None:
        if isinstance(runner, ClosedRunRunner):
            guards.append(runner.types)
        runner = getattr(runner, "inner", None)
    assert [frozenset({"SchedulerWorkflow"})] == guards


def test_the_closed_runs_remembered_are_the_latest() -> None:
    closed = ClosedRuns()
    for i in range(REMEMBERED + 10):
        closed.followed(f"run-{i}")
    assert "run-9" not in closed
    assert "run-10" in closed and f"run-{REMEMBERED + 9}" in closed
