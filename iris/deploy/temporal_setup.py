"""`iris temporal setup`: make an existing Temporal ready for Iris, idempotently, saying what it did.

On a team's cluster the namespace and the search attributes are created once by an operator
(they need admin rights the controller should not have); the controller only checks them. Each
step returns a line for the operator: "created", "exists", or why it could not.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, RegisterNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import SEARCH_ATTRIBUTES

DEFAULT_RETENTION = timedelta(days=7)
NEW_NAMESPACE_WAIT_SECONDS = 60.0
INDEXED_TYPES = {
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT,
}
"""activities.contracts.SEARCH_ATTRIBUTES' type names as the operator API spells them."""


@dataclass(frozen=True)
class SetupStep:
    """One thing setup checked: what, and whether it was created, already there, or failed (with why)."""

    what: str
    outcome: str  # "created" | "exists" | "failed"
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.what}: {self.outcome}" + (f" ({self.detail})" if self.detail else "")


async def ensure_namespace(client: Client, retention: timedelta = DEFAULT_RETENTION) -> SetupStep:
    """Register the client's namespace unless it exists (Temporal Cloud namespaces are made in its console)."""
    what = f"namespace {client.namespace}"
    try:
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=client.namespace))
        return SetupStep(what, "exists")
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            return SetupStep(what, "failed", err.message)
    try:
        await client.workflow_service.register_namespace(
            RegisterNamespaceRequest(
                namespace=client.namespace,
                workflow_execution_retention_period=Duration(seconds=int(retention.total_seconds())),
                description="Iris jobs",
            )
        )
    except RPCError as err:
        if err.status == RPCStatusCode.ALREADY_EXISTS:
            return SetupStep(what, "exists")
        return SetupStep(what, "failed", err.message)
    return SetupStep(what, "created", f"retention {retention.days} days")


async def ensure_search_attributes(client: Client, wait: float = 0.0) -> list[SetupStep]:
    """Add Iris's search attributes the namespace lacks; one step per attribute.

    A namespace just registered reaches every frontend only after its cache refreshes (seconds):
    `wait` is how long to keep asking while the server still says it does not exist.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        try:
            existing = await client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace=client.namespace)
            )
            break
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND or loop.time() > deadline:
                return [SetupStep("search attributes", "failed", err.message)]
            await asyncio.sleep(1.0)
    missing = [name for name in SEARCH_ATTRIBUTES if name not in existing.custom_attributes]
    steps = [SetupStep(f"search attribute {name} ({kind})", "exists") for name, kind in SEARCH_ATTRIBUTES.items()
             if name not in missing]
    if missing:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=client.namespace,
                    search_attributes={name: INDEXED_TYPES[SEARCH_ATTRIBUTES[name]] for name in missing},
                )
            )
            outcome, detail = "created", ""
        except RPCError as err:
            outcome, detail = ("exists", "") if "already" in err.message.lower() else ("failed", err.message)
        steps += [
            SetupStep(f"search attribute {name} ({SEARCH_ATTRIBUTES[name]})", outcome, detail) for name in missing
        ]
    return steps


async def setup(client: Client) -> list[SetupStep]:
    """Namespace first (search attributes live in it), then the search attributes."""
    namespace = await ensure_namespace(client)
    if namespace.outcome == "failed":
        return [namespace]
    wait = NEW_NAMESPACE_WAIT_SECONDS if namespace.outcome == "created" else 0.0
    return [namespace, *await ensure_search_attributes(client, wait=wait)]
