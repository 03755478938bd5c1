"""The look-ahead guard tells a query's look-ahead from a workflow task by the activations alone.

The histories that showed the defect are in the interleaving test (tests/test_scheduler_interleaving.py); here
each rule is checked on activations shaped as the SDK's core sends them (iris/controller/lookahead_guard.py).
"""

from __future__ import annotations

import pytest
import temporalio.bridge.proto.workflow_activation as activation_pb
from temporalio import workflow
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError

from iris.controller.lookahead_guard import LookaheadCheck
from iris.query_retry import LOOKAHEAD_REFUSED
from tests.support import workflows_on_dev_server


def _act(time: int, replaying: bool, *jobs: str, local: bool = False) -> activation_pb.WorkflowActivation:
    act = activation_pb.WorkflowActivation(run_id="r", is_replaying=replaying)
    act.timestamp.FromNanoseconds(time)
    for kind in jobs:
        job = act.jobs.add()
        if kind == "resolve_activity":
            job.resolve_activity.seq = 1
            job.resolve_activity.is_local = local
        else:
            getattr(job, kind).SetInParent()
    return act


def test_a_cold_replay_then_its_task_is_let_through() -> None:
    """A worker new to a run replays its tasks, then runs the task it was given, at that task's later time."""
    check = LookaheadCheck()
    assert check.refusal(_act(1, True, "initialize_workflow")) is None
    assert check.refusal(_act(2, True, "resolve_activity")) is None
    assert check.refusal(_act(3, False, "signal_workflow")) is None
    assert check.refusal(_act(3, True, "query_workflow")) is None  # queries run on the state as it is
    assert check.refusal(_act(4, False, "resolve_activity")) is None  # the next task, on the cached run


def test_a_look_ahead_after_a_replay_is_refused() -> None:
    """A query reaching a worker new to the run while a task is pending: core replays the run, then applies the
    pending events live at the last task's time. The workflow code must not see them."""
    check = LookaheadCheck()
    check.refusal(_act(1, True, "initialize_workflow"))
    check.refusal(_act(2, True, "resolve_activity"))
    reason = check.refusal(_act(2, False, "resolve_activity"))
    assert reason is not None and "look-ahead" in reason


def test_a_look_ahead_on_a_cached_run_is_refused_but_a_local_activity_is_not() -> None:
    """On a cached run: after its task, pending events at that task's time are a look-ahead; a local activity's
    result, resolved within the task that ran it, is not."""
    check = LookaheadCheck()
    check.refusal(_act(1, False, "initialize_workflow"))
    check.refusal(_act(5, False, "signal_workflow"))
    assert check.refusal(_act(5, False, "resolve_activity", local=True)) is None
    assert check.refusal(_act(5, True, "query_workflow")) is None
    assert check.refusal(_act(5, False, "resolve_activity")) is not None


def test_a_replay_after_going_live_is_refused() -> None:
    """A run that went live, then is handed tasks another worker ran (it catches up from a state of its own)."""
    check = LookaheadCheck()
    check.refusal(_act(1, True, "initialize_workflow"))
    check.refusal(_act(5, False, "resolve_activity"))  # the last task, or one a query looked ahead into
    reason = check.refusal(_act(7, True, "signal_workflow"))
    assert reason is not None and "replay" in reason


def test_an_eviction_is_never_refused() -> None:
    check = LookaheadCheck()
    check.refusal(_act(5, False, "initialize_workflow"))
    assert check.refusal(_act(0, False, "remove_from_cache")) is None


def _completed(check: LookaheadCheck, *commands: str) -> None:
    import temporalio.bridge.proto.workflow_completion as completion_pb

    completion = completion_pb.WorkflowActivationCompletion()
    completion.successful.SetInParent()
    for kind in commands:
        getattr(completion.successful.commands.add(), kind).SetInParent()
    check.completed(completion)


def test_what_core_settles_within_the_task_is_let_through() -> None:
    """An activity cancelled with TRY_CANCEL is resolved by core in the same task, at the same time (seen on a dev
    server: fire_timer -> request_cancel_activity, then resolve_activity at that time); so is a local activity."""
    check = LookaheadCheck()
    check.refusal(_act(1, False, "initialize_workflow"))
    _completed(check, "schedule_activity", "start_timer")
    check.refusal(_act(5, False, "fire_timer"))
    _completed(check, "request_cancel_activity")
    assert check.refusal(_act(5, False, "resolve_activity")) is None
    _completed(check, "complete_workflow_execution")
    assert check.refusal(_act(5, False, "resolve_activity")) is not None  # nothing left for core to settle


REFUSALS_LEFT = [0]


@workflow.defn(name="RefusesQueries", sandboxed=False)
class RefusesQueries:
    """Its query is refused as the guard refuses one, as many times as the test says (a module-level count)."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.query
    def value(self) -> str:
        if REFUSALS_LEFT[0] > 0:
            REFUSALS_LEFT[0] -= 1
            raise ApplicationError(f"{LOOKAHEAD_REFUSED}: a live activation with no task started since the last")
        return "answered"


async def test_an_iris_client_asks_a_refused_query_again() -> None:
    """A query the guard refused is asked again by every Iris client (iris.query_retry), so its caller gets the
    answer; a client without the retry sees the refusal."""
    async with workflows_on_dev_server("refused", [RefusesQueries], []) as (client, queue):
        handle = await client.start_workflow(RefusesQueries.run, id=f"refused-{queue}", task_queue=queue)
        REFUSALS_LEFT[0] = 3
        assert "answered" == await handle.query(RefusesQueries.value)  # the suite's client is an Iris client
        bare = Client(client.service_client, namespace=client.namespace)
        REFUSALS_LEFT[0] = 1
        with pytest.raises(WorkflowQueryFailedError, match=LOOKAHEAD_REFUSED):
            await bare.get_workflow_handle(f"refused-{queue}").query(RefusesQueries.value)
        await handle.terminate("test done")
