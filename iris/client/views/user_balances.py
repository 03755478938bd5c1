"""Users as the client sees them: balances and usage the scheduler publishes, and the operator's `set_credits`.

`list_users` reads the scheduler workflow's memo (one describe call), never a query:
the scheduler publishes the table whenever it changes (workflows/scheduler/scheduler_sharing.py).
`set_credits` is a signal to the scheduler; the new balance shows in the table after
its next loop (well under a second on an idle cluster).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.contracts import SCHEDULER_WORKFLOW_ID, SET_CREDITS
from iris.client.submission import resolve_user
from iris.types import UserStatus
from workflows.messages import SetCredits
from workflows.scheduler.sharing_state import DEFAULT_CREDITS_MEMO, USERS_MEMO


def users_from_memo(memo: Mapping[str, Any]) -> list[UserStatus]:
    """The published rows as UserStatus values, by user name."""
    rows = memo.get(USERS_MEMO) or []
    return [UserStatus(str(r[0]), float(r[1]), float(r[2]), int(r[3]), int(r[4])) for r in rows]


async def _memo(client: Client) -> Mapping[str, Any]:
    """The scheduler's memo; empty when no controller ever started it."""
    try:
        desc = await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return {}  # no controller ever started: nobody has used anything
        raise
    return await desc.memo()


async def list_users(client: Client) -> list[UserStatus]:
    """Every user the scheduler knows of (an account, running tasks or pending jobs), by name."""
    return users_from_memo(await _memo(client))


async def user_status(client: Client, user: str) -> UserStatus | None:
    """One user's row; a user the scheduler does not know of yet has the cluster's default credits and has used
    none. None when no scheduler has published its default yet (no controller started, or none since)."""
    memo = await _memo(client)
    found = next((u for u in users_from_memo(memo) if u.user == user), None)
    if found is not None:
        return found
    default = memo.get(DEFAULT_CREDITS_MEMO)
    return UserStatus(user, float(default), 0.0, 0, 0) if default is not None else None


def check_amount(amount: object) -> float:
    """A finite number of credits; ValueError naming `amount` otherwise."""
    if isinstance(amount, bool) or not isinstance(amount, int | float) or not math.isfinite(amount):
        raise ValueError(f"amount must be a finite number of credits, got {amount!r}")
    return float(amount)


async def set_credits(client: Client, user: str, amount: float, settle: float = 10.0) -> None:
    """Set `user`'s remaining balance (an operator's call); usage so far is kept.

    Returns once the published user table shows it (within `settle` s): a `list_users` right after read the
    old balance for a second (the table is published apart from the signal, as a schedule's pause is).
    """
    name = resolve_user(user)
    amount = check_amount(amount)
    await client.get_workflow_handle(SCHEDULER_WORKFLOW_ID).signal(SET_CREDITS, SetCredits(name, amount))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settle
    while loop.time() < deadline:
        row = next((u for u in await list_users(client) if u.user == name), None)
        if row is not None and abs(row.credits - amount) <= 0.01 + 0.001 * abs(amount):  # running work spends a little
            return
        await asyncio.sleep(0.2)
