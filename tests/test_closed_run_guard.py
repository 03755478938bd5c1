"""A query that reaches a scheduler run after it continued as new is refused, not answered by replaying the run.

At 30,000 workers such a replay cost the controller 0.47-0.56 s of CPU beside the next run's first task
(iris/controller/closed_run_guard.py). Here a small workflow continues as new on a real dev server, and its
closed run is queried by its run id, as the server hands over a query that came before the run closed.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
import temporalio.bridge.proto.workflow_activation as activation_pb
import temporalio.bridge.proto.workflow_completion as completion_pb
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.worker import UnsandboxedWorkflowRunner, WorkflowInstance, WorkflowRunner

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


@workflow.defn(name="ContinuesElsewhere", sandboxed=False)
class ContinuesElsewhere:
    """Continues as new on a queue no worker serves: its next run never starts here."""

    @workflow.run
    async def run(self, queue: str) -> None:
        workflow.continue_as_new(queue, task_queue=f"{queue}-nobody")

    @workflow.query
    def alive(self) -> bool:
        return True


async def test_core_says_when_a_run_ended_so_its_replay_is_refused_with_no_next_run_here() -> None:
    """Core evicts a run that continued as new for WORKFLOW_EXECUTION_ENDING (checked against the SDK in use): the
    run is known closed from that alone, before (here: without) the next run's first task on this controller."""
    guarded = ClosedRunRunner(LookaheadRunner(UnsandboxedWorkflowRunner()), ["ContinuesElsewhere"])
    async with workflows_on_dev_server("ending", [ContinuesElsewhere], [], unsandboxed_runner=guarded) as (
        client, queue,
    ):  # fmt: skip
        handle = await client.start_workflow(ContinuesElsewhere.run, queue, id=f"ending-{queue}", task_queue=queue)
        first = handle.result_run_id
        for _ in range(100):
            if first in guarded.closed:
                break
            await asyncio.sleep(0.05)
        assert first in guarded.closed
        bare = Client(client.service_client, namespace=client.namespace)
        with pytest.raises(WorkflowQueryFailedError, match=CLOSED_RUN_REFUSED):
            await bare.get_workflow_handle(handle.id, run_id=first).query(ContinuesElsewhere.alive)
        await client.get_workflow_handle(handle.id).terminate("test done")


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


class _Inner(WorkflowInstance):
    """A workflow instance that answers each activation with the commands it is given (none: an empty success)."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.activations = 0

    def activate(self, act: activation_pb.WorkflowActivation) -> completion_pb.WorkflowActivationCompletion:
        self.activations += 1
        completion = completion_pb.WorkflowActivationCompletion(run_id=act.run_id)
        completion.successful.SetInParent()
        for kind in self.commands:
            getattr(completion.successful.commands.add(), kind).SetInParent()
        return completion

    def get_serialization_context(self, command_info: Any) -> Any:
        return None

    def get_external_store_context(self, command_info: Any) -> Any:
        return None

    def get_info(self) -> workflow.Info:
        raise NotImplementedError

    def get_thread_id(self) -> int | None:
        return None


def _instance(runner: ClosedRunRunner, run_id: str, continued_from: str | None = None) -> tuple[Any, _Inner]:
    inner = _Inner()
    info = SimpleNamespace(workflow_type="SchedulerWorkflow", run_id=run_id, continued_run_id=continued_from)
    return runner.wrap(inner, SimpleNamespace(info=info)), inner  # type: ignore[arg-type]


def _act(run_id: str, kind: str, reason: str = "") -> activation_pb.WorkflowActivation:
    act = activation_pb.WorkflowActivation(run_id=run_id)
    job = act.jobs.add()
    getattr(job, kind).SetInParent()
    if reason:
        job.remove_from_cache.reason = activation_pb.RemoveFromCache.EvictionReason.Value(reason)
    return act


def _refused(completion: completion_pb.WorkflowActivationCompletion) -> bool:
    return completion.HasField("failed") and completion.failed.failure.message.startswith(CLOSED_RUN_REFUSED)


def _replay_after(last_command: str, eviction: str) -> tuple[bool, int]:
    """A run whose live instance ended its last activation with `last_command` and was evicted for `eviction`,
    then replayed (for a query) on the same controller: whether the replay's first activation was refused, and how
    many activations reached its workflow code."""
    runner = ClosedRunRunner(UnsandboxedWorkflowRunner(), ["SchedulerWorkflow"])
    live, inner = _instance(runner, "p")
    live.activate(_act("p", "initialize_workflow"))
    inner.commands = [last_command]
    live.activate(_act("p", "fire_timer"))
    live.activate(_act("p", "remove_from_cache", eviction))
    replay, replayed = _instance(runner, "p")
    refused = _refused(replay.activate(_act("p", "initialize_workflow")))
    replay.activate(_act("p", "remove_from_cache", "LANG_REQUESTED"))  # an eviction always goes through
    return refused, replayed.activations


def test_a_run_evicted_as_ending_after_continuing_as_new_refuses_its_replay_before_the_next_run_starts() -> None:
    """Core evicts a run for WORKFLOW_EXECUTION_ENDING once the server took its last task: a query's replay that
    starts before the next run's first task is refused from its first activation, and runs no workflow code."""
    assert (True, 1) == _replay_after("continue_as_new_workflow_execution", "WORKFLOW_EXECUTION_ENDING")


def test_a_continue_as_new_the_server_refused_is_replayed_as_usual() -> None:
    """A last task the server refused (signals came meanwhile) is evicted as UNHANDLED_COMMAND: the run goes on, and
    its replay must run."""
    assert (False, 2) == _replay_after("continue_as_new_workflow_execution", "UNHANDLED_COMMAND")


def test_a_run_that_ended_without_continuing_is_not_refused() -> None:
    assert (False, 2) == _replay_after("complete_workflow_execution", "WORKFLOW_EXECUTION_ENDING")


def test_a_replay_under_way_stops_when_the_next_run_starts() -> None:
    runner = ClosedRunRunner(UnsandboxedWorkflowRunner(), ["SchedulerWorkflow"])
    replay, replayed = _instance(runner, "p")
    assert not _refused(replay.activate(_act("p", "initialize_workflow")))
    _instance(runner, "r", continued_from="p")
    assert _refused(replay.activate(_act("p", "fire_timer")))
    assert 1 == replayed.activations


def test_the_closed_runs_remembered_are_the_latest() -> None:
    closed = ClosedRuns()
    for i in range(REMEMBERED + 10):
        closed.add(f"run-{i}")
    assert "run-9" not in closed
    assert "run-10" in closed and f"run-{REMEMBERED + 9}" in closed
