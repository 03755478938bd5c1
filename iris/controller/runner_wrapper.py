"""The shape shared by the runner wrappers a controller's worker stacks on the sandbox (payload_guard,
lookahead_guard): a runner whose instances see each activation before (or after) the workflow does."""

from __future__ import annotations

from typing import Any

import temporalio.bridge.proto.workflow_activation as activation_pb
import temporalio.bridge.proto.workflow_completion as completion_pb
from temporalio import workflow
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner


class WrappedInstance(WorkflowInstance):
    """A workflow instance that hands everything to `inner`; a subclass overrides `activate`."""

    def __init__(self, inner: WorkflowInstance) -> None:
        self._inner = inner

    def activate(self, act: activation_pb.WorkflowActivation) -> completion_pb.WorkflowActivationCompletion:
        return self._inner.activate(act)

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._inner.get_external_store_context(command_info)

    def get_info(self) -> workflow.Info:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()


class WrappingRunner(WorkflowRunner):
    """A runner that wraps each instance `inner` creates (`wrap`), and is `inner` in everything else."""

    def __init__(self, inner: WorkflowRunner) -> None:
        self.inner = inner

    def wrap(self, instance: WorkflowInstance, det: WorkflowInstanceDetails) -> WorkflowInstance:
        raise NotImplementedError

    def prepare_workflow(self, defn: workflow._Definition) -> None:
        self.inner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return self.wrap(self.inner.create_instance(det), det)

    def set_worker_level_failure_exception_types(self, types: Any) -> None:
        self.inner.set_worker_level_failure_exception_types(types)

    def __getattr__(self, name: str) -> Any:  # e.g. `restrictions` of the sandbox, read by debug mode
        return getattr(self.inner, name)
