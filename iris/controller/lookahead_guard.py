"""No query may move a cached workflow past its history: activations a query looks ahead with are refused.

A query that reaches a worker while a workflow task is pending (an activity result or a signal is in the
history, the task that takes it has not run yet) is answered by the SDK's core after applying those events:
it runs the workflow code forward with them, as if a workflow task had started, but at the time of the last
task that did (no task started since). Its commands are dropped, yet the workflow's own state keeps what
that code did, and the run stays cached. When the real task then runs — on that worker, or it is replayed —
it sees the same events at a later time: anything the code decides by the clock (the scheduler's
publication intervals, expiries, timeouts) may differ. The cached run then goes on from a state no replay
can rebuild, and the next replay of its history fails as non-deterministic (this is what stopped the
scheduler's interleaving test: docs/reliability.md, "Replays").

This runner wrapper refuses two activations that only such a look-ahead produces, before the workflow code
sees them; the refusal fails the activation, so core evicts the run, and the next task replays it from its
history:

- a live (not replaying) activation at the same workflow time as the one before it: no task started, so
  it is a look-ahead over events no task has taken. Unless what it resolves, core resolves by itself within
  the task: a local activity's result, or what the workflow's last commands cancelled or started and core
  settles at once (an activity cancelled with TRY_CANCEL is resolved in the same task, at the same time);
- a replaying activation after a live one: the run catches up on tasks another worker ran after it ran
  ahead on its own, from a state that may not be theirs.

The query that looked ahead fails with LOOKAHEAD_REFUSED; Iris's clients ask it again (iris.query_retry),
by which time the run is rebuilt (or the task has run). Replays (the Replayer) are not guarded: a history
that ends in the middle of a task is looked ahead into harmlessly there.
"""

from __future__ import annotations

import temporalio.bridge.proto.workflow_activation as activation_pb
import temporalio.bridge.proto.workflow_completion as completion_pb
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails

from iris.controller.runner_wrapper import WrappedInstance, WrappingRunner
from iris.query_retry import LOOKAHEAD_REFUSED


def _kinds(act: activation_pb.WorkflowActivation) -> set[str]:
    """The activation's job kinds, a local activity's resolution told apart from an activity's."""
    kinds: set[str] = set()
    for job in act.jobs:
        kind: str = job.WhichOneof("variant") or ""
        if kind == "resolve_activity" and job.resolve_activity.is_local:
            kind = "resolve_local_activity"
        kinds.add(kind)
    return kinds


SETTLED_BY_CORE = frozenset({
    "request_cancel_activity", "request_cancel_local_activity", "schedule_local_activity",
    "cancel_child_workflow_execution", "request_cancel_external_workflow_execution", "cancel_signal_workflow",
    "request_cancel_nexus_operation",
})  # fmt: skip
"""Commands whose outcome core may hand back within the same task (a new activation, the same workflow time)."""


class LookaheadCheck:
    """What one workflow instance has run: the time of its last activation, whether one was live, and whether
    the last one's commands may be settled by core within its task."""

    def __init__(self) -> None:
        self.last_time: int | None = None
        self.went_live = False
        self.settling = False

    def refusal(self, act: activation_pb.WorkflowActivation) -> str | None:
        """Why `act` must not reach the workflow code (None: it may); notes it when it may."""
        kinds = _kinds(act)
        if not kinds or kinds <= {"query_workflow", "remove_from_cache"}:
            return None  # queries run on the state as it is (query_guard checks they change nothing)
        time = act.timestamp.ToNanoseconds()
        if act.is_replaying and self.went_live:
            return "a replay after this run went live: it catches up on tasks it did not run"
        within_task = self.settling or kinds == {"resolve_local_activity"}
        if not act.is_replaying and time == self.last_time and not within_task:
            return "a live activation with no task started since the last: a query's look-ahead"
        self.last_time = time
        self.went_live = self.went_live or not act.is_replaying
        return None

    def completed(self, completion: completion_pb.WorkflowActivationCompletion) -> None:
        """Note what the workflow answered an activation let through with."""
        commands = completion.successful.commands if completion.HasField("successful") else ()
        self.settling = any(c.WhichOneof("variant") in SETTLED_BY_CORE for c in commands)


class _LookaheadInstance(WrappedInstance):
    def __init__(self, inner: WorkflowInstance) -> None:
        super().__init__(inner)
        self._check = LookaheadCheck()

    def activate(self, act: activation_pb.WorkflowActivation) -> completion_pb.WorkflowActivationCompletion:
        reason = self._check.refusal(act)
        if reason is None:
            completion = self._inner.activate(act)
            if not act.jobs or act.jobs[0].WhichOneof("variant") != "query_workflow":
                self._check.completed(completion)
            return completion
        completion = completion_pb.WorkflowActivationCompletion()
        completion.failed.failure.message = f"{LOOKAHEAD_REFUSED}: {reason} (the run is evicted and replayed)"
        return completion


class LookaheadRunner(WrappingRunner):
    """A workflow runner (the sandbox, usually) whose instances refuse a query's look-ahead."""

    def wrap(self, instance: WorkflowInstance, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _LookaheadInstance(instance)
