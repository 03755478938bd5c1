"""A workflow's memo, carried whole across continue-as-new.

Given no memo, the server starts the next run with the memo the closing run *started* with: what the run upserted
since is dropped, and every reader of the workflow's memo (`iris reservation list`, the users' and teams' tables, a
job's state in `iris job list`) sees that older memo until the next run publishes again. On the dev server, a memo
started as "at start" and upserted to "upserted" read "at start" in the next run (`tests/test_memo_carried.py`).
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue


def memo_now() -> dict[str, RawValue]:
    """The run's memo as it is now, upserts included, for `workflow.continue_as_new(memo=...)`: its payloads as they
    are, not decoded and encoded again."""
    return {key: RawValue(payload) for key, payload in workflow.info().raw_memo.items()}
