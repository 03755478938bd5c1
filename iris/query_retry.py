"""Queries a controller refused for looking ahead are asked again (iris.controller.lookahead_guard says why).

Every Temporal client an Iris process opens (iris.connection.connect_client) carries this interceptor, so a
caller never sees the refusal: by the time it asks again the run has been evicted and rebuilt from its
history, or the pending task has run.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import Interceptor, OutboundInterceptor, QueryWorkflowInput, WorkflowQueryFailedError

LOOKAHEAD_REFUSED = "iris: query look-ahead refused"
"""The start of the failure a controller gives a query that would have run a workflow past its history."""

ATTEMPTS = 8
PAUSE = 0.05  # seconds before the second attempt, doubled for each next one up to MAX_PAUSE (~3.5 s in all)
MAX_PAUSE = 1.0


class _Outbound(OutboundInterceptor):
    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        for attempt in range(ATTEMPTS):
            try:
                return await super().query_workflow(input)
            except WorkflowQueryFailedError as err:
                if LOOKAHEAD_REFUSED not in str(err) or attempt == ATTEMPTS - 1:
                    raise
            await asyncio.sleep(min(MAX_PAUSE, PAUSE * 2**attempt))
        raise AssertionError("unreachable")


class QueryRetry(Interceptor):
    """A client interceptor: a query refused with LOOKAHEAD_REFUSED is asked again, up to ATTEMPTS times."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Outbound(next)
