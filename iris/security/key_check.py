"""Pre-flight: does this process hold the key the cluster's controllers encrypt with? Asked before anything is sent.

A worker agent with another codec key would sign up with signals the scheduler cannot read
(dropped, see `iris.controller.payload_guard`) and then wait for an answer that never comes; a client with
another key would start jobs whose input no controller can read. Both learn it here instead, in
one line naming the key ids, before they send anything.

The evidence is the scheduler's own history, read raw (nothing is decoded): the newest payload a
controller wrote there, i.e. the workflow's start or continue-as-new input, an activity's input or
result, or a local activity's result. Signals are not evidence: anyone may send one, and a stray
sender must not decide for everyone. Reading history needs no controller to be up. History can be
stale (the controllers were just restarted with a key), so a mismatch is confirmed by asking the
scheduler a query, whose answer a running controller encrypts with its key now; when no controller
answers, the history decides. A cluster whose scheduler has not run yet gives no evidence, and the
check passes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

import structlog
from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.query.v1 import WorkflowQuery
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest, QueryWorkflowRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import HEALTHY_WORKER_QUERY, SCHEDULER_WORKFLOW_ID
from iris.security.codec import EncryptionCodec, payload_key_id
from worker_agent.encryption import KeyMismatchError, mismatch_message

log = structlog.get_logger("iris.security.key_check")

HISTORY_SECONDS = 5.0
"""How long one page of the scheduler's history may take (a server that does not answer tells nothing)."""
QUERY_SECONDS = 3.0
"""How long a mismatch waits for a running controller to confirm it."""
PAGE_EVENTS = 50  # the newest controller-written payload is usually a few events back; payloads can be big
MAX_PAGES = 8


@dataclass(frozen=True)
class Evidence:
    """The key id (None: plaintext) of the newest controller-written payload, and the event it came from."""

    key_id: str | None
    event_id: int
    event: str


def controller_payloads(event: HistoryEvent) -> list[Payload]:
    """The payloads of `event` that a controller (or the workflow it runs) wrote; [] for any other event."""
    if event.HasField("workflow_execution_started_event_attributes"):
        return list(event.workflow_execution_started_event_attributes.input.payloads)
    if event.HasField("activity_task_scheduled_event_attributes"):
        return list(event.activity_task_scheduled_event_attributes.input.payloads)
    if event.HasField("activity_task_completed_event_attributes"):
        return list(event.activity_task_completed_event_attributes.result.payloads)
    if event.HasField("marker_recorded_event_attributes"):  # a local activity's result (its "data" is the SDK's)
        result = event.marker_recorded_event_attributes.details.get("result")
        return list(result.payloads) if result is not None else []
    return []


def newest_evidence(events: Iterable[HistoryEvent]) -> Evidence | None:
    """The first event of `events` (newest first) with controller-written payloads, as Evidence."""
    for event in events:
        payloads = controller_payloads(event)
        if payloads:
            kind = event.WhichOneof("attributes") or "event"
            return Evidence(payload_key_id(payloads[0]), event.event_id, kind.removesuffix("_event_attributes"))
    return None


async def cluster_evidence(client: Client) -> Evidence | None:
    """What the scheduler's current run says of the controllers' key; None without a scheduler or evidence."""
    token = b""
    for _ in range(MAX_PAGES):
        request = GetWorkflowExecutionHistoryReverseRequest(
            namespace=client.namespace, execution=WorkflowExecution(workflow_id=SCHEDULER_WORKFLOW_ID),
            maximum_page_size=PAGE_EVENTS, next_page_token=token,
        )  # fmt: skip
        try:
            page = await client.workflow_service.get_workflow_execution_history_reverse(
                request, timeout=timedelta(seconds=HISTORY_SECONDS)
            )
        except RPCError as err:  # no scheduler yet (NOT_FOUND), or no right to read it: nothing tells
            if err.status != RPCStatusCode.NOT_FOUND:
                log.warning("cluster_key_unchecked", error=err.message)
            return None
        found = newest_evidence(page.history.events)
        if found is not None or not page.next_page_token:
            return found
        token = page.next_page_token
    return None


def held_key_id(client: Client) -> str | None:
    """The key id of the client's codec; None for a client without a key."""
    codec = client.data_converter.payload_codec
    return codec.key_id if isinstance(codec, EncryptionCodec) else None


async def answering_key_id(client: Client) -> str | Literal["no answer"] | None:
    """The key id of a running controller's answer to a scheduler query (None: plaintext); "no answer" if none comes."""
    request = QueryWorkflowRequest(
        namespace=client.namespace, execution=WorkflowExecution(workflow_id=SCHEDULER_WORKFLOW_ID),
        query=WorkflowQuery(query_type=HEALTHY_WORKER_QUERY),
    )  # fmt: skip
    try:
        answer = await client.workflow_service.query_workflow(request, timeout=timedelta(seconds=QUERY_SECONDS))
    except RPCError:
        return "no answer"
    payloads = answer.query_result.payloads
    return payload_key_id(payloads[0]) if payloads else "no answer"


async def check_cluster_key(client: Client) -> None:
    """Return when `client`'s key matches the controllers' (or nothing tells); KeyMismatchError naming both ids."""
    evidence = await cluster_evidence(client)
    held = held_key_id(client)
    if evidence is None or evidence.key_id == held:
        return
    live = await answering_key_id(client)
    if live == held:
        log.info("cluster_key_history_stale", held_key_id=held, history_key_id=evidence.key_id)
        return
    found = evidence.key_id if live == "no answer" else live
    raise KeyMismatchError(mismatch_message("the cluster's payloads are", found, held))
