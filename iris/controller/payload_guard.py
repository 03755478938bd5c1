"""No poison pills: a signal a workflow cannot read is dropped and recorded, never retried forever.

Anyone who can reach the namespace can signal the singleton scheduler: a worker holding another
codec key, an old client whose dataclass lacks a field, a script sending garbage. A payload a
workflow task cannot process fails that task, Temporal retries it, and since the bad event stays in
the history every retry fails the same way: the scheduler (and every job waiting on it) stops for
good. So no unreadable payload may fail a workflow task of the controller:

- the codec never raises (`iris.security.codec`): a payload it cannot decrypt stays encoded, its reason
  beside it, and Iris's payload converter raises `UnreadablePayload` where the value is read;
- a typed signal handler whose arguments do not convert (undecryptable, malformed, missing a
  field) is dropped by the SDK itself before the handler runs (temporalio logs and drops it);
- a handler that decodes its payload by hand (`RawValue`) raises `UnreadablePayload`, which this
  module's workflow interceptor catches: the signal is dropped.

Either way the drop is recorded, outside replay, as one structured log line (`payload_dropped`:
workflow type and id, signal, reason naming the key ids) and the `iris_dropped_payloads_total`
counter (`/metrics` of the controller). Replays of the same history record nothing again: the
runner wrapper knows whether an activation replays. The sender learns why where it can: a worker
with the wrong key refuses to start (`iris.security.key_check`) before it signals anything.

Updates are rejected back to their caller when their arguments do not convert (the SDK does it),
and queries fail alone; neither can wedge a workflow. Payloads the workflow's own activities and
children return are written by controllers holding the key, so they are not guarded: a controller
with the wrong key fails its tasks until one with the right key takes them.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

import structlog
import temporalio.bridge.proto.workflow_activation
import temporalio.bridge.proto.workflow_completion
from prometheus_client import Counter
from temporalio import workflow
from temporalio.worker import (
    HandleSignalInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowInterceptorClassInput,
)

from activities.contracts import UnreadablePayload
from iris.controller.observability import REGISTRY
from iris.controller.runner_wrapper import WrappedInstance, WrappingRunner

log = structlog.get_logger("iris.controller.payload_guard")

DROPPED = Counter(
    "iris_dropped_payloads",
    "Signals dropped because their payload could not be read (another key, malformed, another version)",
    ["workflow_type", "signal"],
    registry=REGISTRY,
)

SDK_LOGGER = "temporalio.worker._workflow_instance"
_SDK_DROP = re.compile(r"^Failed deserializing signal input for (?P<signal>\S+) on workflow ")


@dataclass(frozen=True)
class Drop:
    """One dropped signal, recorded at the end of the activation that dropped it."""

    signal: str
    reason: str


_activation = threading.local()
"""Per workflow thread: the drops of the activation running on it (`drops`, a list), if guarded."""


def _note(drop: Drop) -> bool:
    """Add `drop` to the running activation's list; False when no guarded activation runs on this thread."""
    drops: list[Drop] | None = getattr(_activation, "drops", None)
    if drops is None:
        return False
    drops.append(drop)
    return True


def _reason(err: BaseException | None) -> str:
    """Why a payload could not be read, on one line: the UnreadablePayload in `err`'s chain, else its root cause.

    The SDK wraps a conversion error in "Failed decoding arguments"; the cause is what says why.
    """
    chain: list[BaseException] = []
    while err is not None and err not in chain:
        chain.append(err)
        err = err.__cause__ or err.__context__
    for link in chain:
        if isinstance(link, UnreadablePayload):
            return " ".join(str(link).split())
    if not chain:
        return "unreadable payload"
    root = chain[-1]
    return f"{type(root).__name__}: {' '.join(str(root).split())}"


class _SdkDropFilter(logging.Filter):
    """Turns the SDK's multi-line "dropping the signal" record into a recorded Drop of the running activation."""

    def filter(self, record: logging.LogRecord) -> bool:
        match = _SDK_DROP.match(str(record.msg))
        if match is None:
            return True
        exc = record.exc_info[1] if record.exc_info else None
        return not _note(Drop(match["signal"], _reason(exc)))


_FILTER = _SdkDropFilter()
logging.getLogger(SDK_LOGGER).addFilter(_FILTER)


class _GuardedInstance(WrappedInstance):
    """Runs the inner instance's activations, then records their drops unless the activation replays."""

    def __init__(self, inner: WorkflowInstance, workflow_type: str) -> None:
        super().__init__(inner)
        self._workflow_type = workflow_type

    def activate(
        self, act: temporalio.bridge.proto.workflow_activation.WorkflowActivation
    ) -> temporalio.bridge.proto.workflow_completion.WorkflowActivationCompletion:
        _activation.drops = []
        try:
            completion = self._inner.activate(act)
        finally:
            drops: list[Drop] = _activation.drops
            _activation.drops = None
        if drops and not act.is_replaying:
            info = self._inner.get_info()
            for drop in drops:
                DROPPED.labels(self._workflow_type, drop.signal).inc()
                log.warning(
                    "payload_dropped", workflow_type=self._workflow_type, workflow_id=info.workflow_id,
                    run_id=info.run_id, signal=drop.signal, reason=drop.reason,
                )  # fmt: skip
        return completion


class GuardedRunner(WrappingRunner):
    """A workflow runner (the sandbox, usually) whose instances record the signals they drop."""

    def wrap(self, instance: WorkflowInstance, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _GuardedInstance(instance, det.defn.name or "dynamic")


class _GuardInbound(WorkflowInboundInterceptor):
    async def handle_signal(self, input: HandleSignalInput) -> None:
        try:
            await super().handle_signal(input)
        except UnreadablePayload as err:
            if not _note(Drop(input.signal, _reason(err))):
                workflow.logger.warning("dropped signal %s: %s", input.signal, err)


class PayloadGuard(Interceptor):
    """The worker interceptor that drops a signal whose handler raises UnreadablePayload."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _GuardInbound
