"""The users, token hashes, roles and bounded audit log of team mode, as the AuthWorkflow keeps them.

Pure dataclasses and functions (no Temporal calls): the workflow applies them, unit tests call them
directly, and continue-as-new hands `AuthState` over whole. These are also the payloads of the
workflow's updates, signal and queries (one definition, here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

AUTH_WORKFLOW_ID = "iris-auth"
ADD_USER = "add_user"
REVOKE_USER = "revoke_user"
RECORD_AUDIT = "record_audit"
DIRECTORY_QUERY = "directory"
AUDIT_QUERY = "audit"
MAX_AUDIT = 2_000
"""Audit entries kept (oldest dropped first): ~150 bytes each, far below the 2 MB payload limit."""
MAX_TOKENS_PER_USER = 8


@dataclass
class AuthUser:
    name: str
    role: str
    token_hashes: list[str] = field(default_factory=list)
    created_at: float = 0.0
    revoked_at: float = 0.0


@dataclass
class AuditEntry:
    """One mutation: who did it, what, to what, when (epoch seconds, from the API that checked it)."""

    at: float
    user: str
    action: str
    subject: str = ""
    detail: str = ""
    allowed: bool = True


@dataclass
class AuthState:
    users: list[AuthUser] = field(default_factory=list)
    audit: list[AuditEntry] = field(default_factory=list)  # oldest first


@dataclass
class AddUser:
    """Create `name` with one token (its hash); `bootstrap` succeeds only while no admin has a token."""

    name: str
    role: str
    token_hash: str
    at: float
    by: str = ""
    bootstrap: bool = False


@dataclass
class RevokeUser:
    name: str
    at: float
    by: str = ""
    # With OIDC, a name Iris issued no token to may be an SSO user's: it is recorded revoked, so their sign-in
    # is refused (`Directory.role_of`) until an admin adds the name again.
    unknown_ok: bool = False


@dataclass
class AuthAnswer:
    """An update's outcome: ok, or why not (one line)."""

    ok: bool
    reason: str = ""


@dataclass
class Directory:
    users: list[AuthUser] = field(default_factory=list)


@dataclass
class AuditRequest:
    since: float = 0.0
    limit: int = MAX_AUDIT


@dataclass
class AuditLog:
    entries: list[AuditEntry] = field(default_factory=list)  # newest first


def find_user(state: AuthState, name: str) -> AuthUser | None:
    return next((u for u in state.users if u.name == name), None)


def add_user(state: AuthState, req: AddUser) -> AuthAnswer:
    """Create the user (or give a revoked one a new life); idempotent for a retried identical request."""
    if req.bootstrap and any(u.role == "admin" and u.token_hashes for u in state.users):
        return AuthAnswer(False, "an admin already exists; ask an admin for a token (`iris auth add-user`)")
    user = find_user(state, req.name)
    if user is not None and req.token_hash in user.token_hashes:
        return AuthAnswer(True)  # the same update delivered twice
    if user is not None and user.token_hashes and not req.bootstrap:
        return AuthAnswer(False, f"user {req.name} exists; `iris auth revoke {req.name}` first to issue a new token")
    if user is None:
        user = AuthUser(req.name, req.role, created_at=req.at)
        state.users.append(user)
    elif user.revoked_at:  # a new life: what was issued in the last one (its jobs' task tokens) stays dead
        user.created_at = req.at
    user.role, user.revoked_at = req.role, 0.0
    user.token_hashes = [*user.token_hashes, req.token_hash][-MAX_TOKENS_PER_USER:]
    record(state, [AuditEntry(req.at, req.by or req.name, "bootstrap" if req.bootstrap else "add-user", req.name,
                              req.role)])  # fmt: skip
    return AuthAnswer(True)


def revoke_user(state: AuthState, req: RevokeUser) -> AuthAnswer:
    user = find_user(state, req.name)
    if user is None and not req.unknown_ok:
        return AuthAnswer(False, f"no such user: {req.name}")
    if user is None:
        user = AuthUser(req.name, "user", created_at=req.at)
        state.users.append(user)
    admins = [u for u in state.users if u.role == "admin" and u.token_hashes and not u.revoked_at]
    if admins == [user]:
        return AuthAnswer(False, f"{req.name} is the last admin: add another first (`iris auth add-user NAME --admin`)")
    user.token_hashes, user.revoked_at = [], req.at
    record(state, [AuditEntry(req.at, req.by, "revoke", req.name)])
    return AuthAnswer(True)


def record(state: AuthState, entries: list[AuditEntry]) -> None:
    """Append, keeping the newest MAX_AUDIT."""
    state.audit.extend(entries)
    if len(state.audit) > MAX_AUDIT:
        del state.audit[: len(state.audit) - MAX_AUDIT]


def audit_since(state: AuthState, req: AuditRequest) -> AuditLog:
    """Newest first by when each thing was done: entries arrive in batches (the API flushes its own every
    few seconds, user changes come at once), so the order they arrived in is not the order of their times."""
    out = sorted((e for e in reversed(state.audit) if e.at >= req.since), key=lambda e: e.at, reverse=True)
    return AuditLog(out[: max(0, req.limit)])
