"""The controller's side of the AuthWorkflow: start it, change it, and keep a fresh copy of the directory.

Verification must not cost a query per request, so the directory is cached and re-read every
REFRESH_SECONDS in the background, in line when the copy is STALE_SECONDS old (after an idle spell),
and at once, at most every MISS_REFRESH_SECONDS, when a token is not found: a revoked token stops
working within STALE_SECONDS on every controller, at once on the one that revoked it. Audit entries are
buffered and sent as one signal about every FLUSH_SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import timedelta

import structlog
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy

from activities.contracts import CONTROL_TASK_QUEUE, KIND_ATTRIBUTE
from iris.auth.tokens import new_token, same_hash, token_hash
from workflows.auth import auth_state as st
from workflows.auth.auth_workflow import AuthWorkflow

log = structlog.get_logger("iris.auth")

REFRESH_SECONDS = 2.0
MISS_REFRESH_SECONDS = 0.5
STALE_SECONDS = 5.0
"""No request is decided on a copy older than this: a revoked token stops within it on every controller."""
FLUSH_SECONDS = 5.0
"""Audit entries go to the workflow in one signal at most this often: a workflow task per flush, not per call."""
AUTH_KIND = "auth"
QUERY_TIMEOUT = timedelta(seconds=5)


async def ensure_auth_workflow(client: Client) -> None:
    """Start the singleton AuthWorkflow unless it runs (idempotent; every controller in team mode calls it)."""
    await client.start_workflow(
        AuthWorkflow.run, None, id=st.AUTH_WORKFLOW_ID, task_queue=CONTROL_TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        search_attributes=TypedSearchAttributes([SearchAttributePair(SearchAttributeKey.for_keyword(KIND_ATTRIBUTE),
                                                                     AUTH_KIND)]),
        static_summary="Iris users, roles and audit log (team mode)",
    )  # fmt: skip


async def add_user(client: Client, name: str, role: str, *, by: str = "", bootstrap: bool = False) -> str:
    """Create `name` with `role`; its token (shown once). ValueError (one line) when refused."""
    await ensure_auth_workflow(client)
    token = new_token(name)
    req = st.AddUser(name=name, role=role, token_hash=token_hash(token), at=time.time(), by=by, bootstrap=bootstrap)
    answer = await client.get_workflow_handle(st.AUTH_WORKFLOW_ID).execute_update(
        st.ADD_USER, req, result_type=st.AuthAnswer
    )
    if not answer.ok:
        raise ValueError(answer.reason)
    return token


async def revoke_user(client: Client, name: str, *, by: str = "", unknown_ok: bool = False) -> None:
    """KeyError for a name Iris does not know (unless `unknown_ok`), ValueError for the last admin."""
    revoke = st.RevokeUser(name=name, at=time.time(), by=by, unknown_ok=unknown_ok)
    answer = await client.get_workflow_handle(st.AUTH_WORKFLOW_ID).execute_update(
        st.REVOKE_USER, revoke, result_type=st.AuthAnswer
    )
    if not answer.ok:
        raise (KeyError if answer.reason.startswith("no such user") else ValueError)(answer.reason)


async def read_audit(client: Client, since: float = 0.0, limit: int = st.MAX_AUDIT) -> list[st.AuditEntry]:
    log_ = await client.get_workflow_handle(st.AUTH_WORKFLOW_ID).query(
        st.AUDIT_QUERY, st.AuditRequest(since, limit), result_type=st.AuditLog, rpc_timeout=QUERY_TIMEOUT
    )
    return log_.entries


class Directory:
    """A cached copy of the users and their token hashes, with the audit buffer beside it."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._users: dict[str, st.AuthUser] = {}
        self._by_hash: dict[str, str] = {}
        self._read_at = 0.0
        self._lock = asyncio.Lock()
        self._pending: list[st.AuditEntry] = []
        self._flusher: asyncio.Task[None] | None = None
        self._refresher: asyncio.Future[None] | None = None

    async def refresh(self, *, older_than: float = REFRESH_SECONDS) -> None:
        async with self._lock:
            if time.monotonic() - self._read_at < older_than:
                return
            found = await self.client.get_workflow_handle(st.AUTH_WORKFLOW_ID).query(
                st.DIRECTORY_QUERY, result_type=st.Directory, rpc_timeout=QUERY_TIMEOUT
            )
            self._users = {u.name: u for u in found.users}
            self._by_hash = {h: u.name for u in found.users for h in u.token_hashes}
            self._read_at = time.monotonic()

    async def _fresh_enough(self) -> None:
        """A copy at most STALE_SECONDS old: read in line past that (after an idle spell), else refreshed in the
        background once REFRESH_SECONDS old (under steady traffic no request waits on a query's round trip)."""
        age = time.monotonic() - self._read_at
        if not self._read_at or age >= STALE_SECONDS:
            await self.refresh(older_than=STALE_SECONDS)
        elif age >= REFRESH_SECONDS and (self._refresher is None or self._refresher.done()):
            self._refresher = asyncio.ensure_future(self._refresh_quietly())

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except Exception as err:  # the copy stays as it was; the next request tries again
            log.warning("directory_refresh_failed", error=str(err))

    async def user_of(self, token: str) -> st.AuthUser | None:
        """The active user holding `token`, or None (reading again at once, at most every MISS_REFRESH_SECONDS,
        when it is missing)."""
        await self._fresh_enough()
        digest = token_hash(token)
        name = self._by_hash.get(digest)
        if name is None:
            await self.refresh(older_than=MISS_REFRESH_SECONDS)
            name = self._by_hash.get(digest)
        user = self._users.get(name) if name else None
        if user is None or not any(same_hash(digest, h) for h in user.token_hashes):
            return None
        return user

    async def role_of(self, name: str) -> str | None:
        """The role a named user holds (for OIDC identities), None for a user Iris does not know; "" if revoked."""
        await self._fresh_enough()
        user = self._users.get(name)
        if user is None:
            return None
        return "" if user.revoked_at else user.role

    async def life_began(self, name: str) -> float:
        """When `name` was added (again, after a revoke: `created_at`); 0.0 for a user Iris does not know."""
        await self._fresh_enough()
        user = self._users.get(name)
        return user.created_at if user is not None else 0.0

    def forget(self, name: str) -> None:
        """This controller revoked `name`: drop its tokens from the copy now, not at the next refresh."""
        user = self._users.get(name)
        if user is not None:
            self._by_hash = {h: n for h, n in self._by_hash.items() if n != name}
            user.token_hashes, user.revoked_at = [], time.time()

    def record(self, entry: st.AuditEntry) -> None:
        self._pending.append(entry)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(FLUSH_SECONDS)
        await self.flush()

    async def flush(self) -> None:
        entries, self._pending = self._pending[: st.MAX_AUDIT], self._pending[st.MAX_AUDIT :]
        if not entries:
            return
        try:
            await self.client.get_workflow_handle(st.AUTH_WORKFLOW_ID).signal(st.RECORD_AUDIT, entries)
        except Exception as err:  # keep them for the next flush rather than lose them
            log.warning("audit_flush_failed", entries=len(entries), error=str(err))
            self._pending[:0] = entries

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        await self.flush()
