"""Queries a controller refused for a moment are asked again, so a caller sees the answer, not the refusal.

Three refusals pass soon:
- a query that would have run a workflow past its history (iris.controller.lookahead_guard says why): by the
  time it is asked again the run has been evicted and rebuilt from its history, or the pending task has run;
- a query that reached a scheduler run after it continued as new (iris.controller.closed_run_guard): asked
  again, it goes to the current run;
- a query for the scheduler's whole state while its run loads what the previous run carried over, or after it
  handed the state to the next (activities.contracts.SCHEDULER_NOT_WHOLE): a few seconds at 10,000 workers.

Every Temporal client an Iris process opens (iris.connection.connect_client) carries this interceptor.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.client import Interceptor, OutboundInterceptor, QueryWorkflowInput, WorkflowQueryFailedError

from activities.contracts import SCHEDULER_NOT_WHOLE

LOOKAHEAD_REFUSED = "iris: query look-ahead refused"
"""The start of the failure a controller gives a query that would have run a workflow past its history."""
CLOSED_RUN_REFUSED = "iris: query of a run that continued as new refused"
"""The start of the failure a controller gives a query that reached a scheduler run after it continued as new
(iris.controller.closed_run_guard): asked again, the query goes to the current run."""

ATTEMPTS = 8
PAUSE = 0.05  # seconds before the second attempt, doubled for each next one up to MAX_PAUSE (~3.5 s in all)
MAX_PAUSE = 1.0
NOT_WHOLE_PAUSE = 0.2  # seconds between two asks of a query refused as not whole
NOT_WHOLE_SECONDS = 20.0
"""How long a query the scheduler refused as not whole is asked again. Loading took 24 workflow tasks at
10,000 workers and 100,000 tasks; an autoscaler's plan (30 s to run) still gets its turn after this."""


class _Outbound(OutboundInterceptor):
    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        deadline = time.monotonic() + NOT_WHOLE_SECONDS
        refused_ahead = 0
        while True:
            try:
                return await super().query_workflow(input)
            except WorkflowQueryFailedError as err:
                if LOOKAHEAD_REFUSED in str(err) or CLOSED_RUN_REFUSED in str(err):
                    refused_ahead += 1
                    if refused_ahead == ATTEMPTS:
                        raise
                    pause = PAUSE * 2 ** (refused_ahead - 1)
                elif SCHEDULER_NOT_WHOLE in str(err) and time.monotonic() < deadline:
                    pause = NOT_WHOLE_PAUSE
                else:
                    raise
            await asyncio.sleep(min(MAX_PAUSE, pause))


class QueryRetry(Interceptor):
    """A client interceptor: a query refused with LOOKAHEAD_REFUSED or CLOSED_RUN_REFUSED (up to ATTEMPTS times in
    all) or SCHEDULER_NOT_WHOLE (for up to NOT_WHOLE_SECONDS) is asked again."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Outbound(next)
