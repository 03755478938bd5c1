"""A query that reaches a scheduler run after it continued as new is refused, not answered by replaying the run.

The server hands a query to the run that is current when the query comes. If that run continues as new before
the controller answers, the controller has already evicted it, and the SDK answers by replaying the run's whole
history from its first event: at 30,000 workers x 300,000 tasks 0.47-0.56 s of CPU per replay, in the controller's
process, at the moment the next run's first task loads the carried state. The two share the GIL, and such a load
took twice its CPU time in wall time (244 ms for 120 ms of CPU, the longest scheduler task of its bench run).

A run is known closed on this controller once core evicted it for WORKFLOW_EXECUTION_ENDING after it continued
as new (core does so only when the server took that last task), or once a later run names it as the run it
continued from (`continued_run_id`). An instance of such a run can only be replaying for a query (a closed run has
no more tasks), so its activations are refused before the workflow code runs. (Knowing it from the next run alone
was not enough in the scale bench: when the query's replay started first, its first activation, loading the old
run's carried state, ~120 ms of CPU, still ran beside the next run's load.) The query fails with
CLOSED_RUN_REFUSED; Iris's clients ask it again (iris.query_retry), and the server hands it to the current run.

Only the workflow types given are guarded (the scheduler's is the one whose replay is long). A controller that did
not run the closed run's last task nor see the next run start (another controller, or one restarted since) still
answers by replaying, as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection

import temporalio.bridge.proto.workflow_activation as activation_pb
import temporalio.bridge.proto.workflow_completion as completion_pb
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner

from iris.controller.runner_wrapper import WrappedInstance, WrappingRunner
from iris.query_retry import CLOSED_RUN_REFUSED

REMEMBERED = 256
"""Closed runs remembered per worker (the scheduler continues as new every few minutes at most)."""


class ClosedRuns:
    """The runs known to have continued as new: at most REMEMBERED, the oldest forgotten first."""

    def __init__(self) -> None:
        self._runs: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()  # instances are created from the workflow executor's threads

    def add(self, run_id: str) -> None:
        with self._lock:
            self._runs[run_id] = None
            while len(self._runs) > REMEMBERED:
                self._runs.popitem(last=False)

    def __contains__(self, run_id: object) -> bool:
        with self._lock:
            return run_id in self._runs


_ENDING = activation_pb.RemoveFromCache.EvictionReason.WORKFLOW_EXECUTION_ENDING


class _GuardedInstance(WrappedInstance):
    """An instance of a guarded type: once its run is known closed, it answers no activation but its eviction
    (checked at each activation: a replay already under way when the next run starts stops at its next one)."""

    def __init__(self, inner: WorkflowInstance, run_id: str, closed: ClosedRuns) -> None:
        super().__init__(inner)
        self._run_id = run_id
        self._closed = closed
        self._continuing = False  # an activation of this instance ended with continue-as-new

    def activate(self, act: activation_pb.WorkflowActivation) -> completion_pb.WorkflowActivationCompletion:
        if all(job.WhichOneof("variant") == "remove_from_cache" for job in act.jobs):
            # Core evicts a run for WORKFLOW_EXECUTION_ENDING only once the server took its last task (a task the
            # server refused, e.g. for signals that came meanwhile, is evicted as UNHANDLED_COMMAND and replayed).
            if self._continuing and any(job.remove_from_cache.reason == _ENDING for job in act.jobs):
                self._closed.add(self._run_id)  # known closed even before the next run's first task
            return self._inner.activate(act)
        if self._run_id not in self._closed:
            completion = self._inner.activate(act)
            if completion.HasField("successful") and any(
                command.HasField("continue_as_new_workflow_execution") for command in completion.successful.commands
            ):
                self._continuing = True
            return completion
        completion = completion_pb.WorkflowActivationCompletion()
        completion.failed.failure.message = (
            f"{CLOSED_RUN_REFUSED}: run {self._run_id} has continued as new; the current run answers"
        )
        return completion


class ClosedRunRunner(WrappingRunner):
    """A workflow runner whose instances of closed runs of `types` refuse to replay (see the module)."""

    def __init__(self, inner: WorkflowRunner, types: Collection[str]) -> None:
        super().__init__(inner)
        self.types = frozenset(types)
        self.closed = ClosedRuns()

    def wrap(self, instance: WorkflowInstance, det: WorkflowInstanceDetails) -> WorkflowInstance:
        info = det.info
        if info.workflow_type not in self.types:
            return instance
        if info.continued_run_id is not None:
            self.closed.add(info.continued_run_id)
        return _GuardedInstance(instance, info.run_id, self.closed)
