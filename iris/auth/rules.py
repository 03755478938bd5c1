"""Who may do what: roles, actions and the one table that decides (public-api.md, "Identity and access").

Pure: an identity, an action and (for a job's action) the job's owner go in; `decide` gives a
`Decision` value, `authorize` raises `PermissionDeniedError` naming the action, job and owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from iris.auth.errors import PermissionDeniedError


class Role(StrEnum):
    ADMIN = "admin"
    USER = "user"
    WORKER = "worker"  # serves as an agent (`iris worker serve`): nothing else through the API


class Action(StrEnum):
    SUBMIT = "submit"
    READ = "read"  # list_jobs, status, list_workers, list_users, queue, dashboard pages
    KILL = "kill"
    LOGS = "logs"  # fetch_task_logs, results
    EXEC = "exec"  # iris task exec / profile
    CREDITS = "credits"
    FLEET = "fleet"  # cordon, drain, slice terminate
    USERS = "users"  # add-user, revoke, audit
    SERVE = "serve"  # enroll as an agent: learn where the control plane is (`iris worker serve`)
    SCHEDULE = "schedule"  # pause, unpause, trigger or delete a schedule (its owner: the user who created it)


class Scope(StrEnum):
    """Who may take an action, for the `user` and `worker` roles (admins may take every action)."""

    ANYONE = "anyone"  # every user
    OWNER = "owner"  # the job's owner (the user of its root job)
    NOBODY = "nobody"  # admins only


USER_SCOPE: dict[Action, Scope] = {
    Action.SUBMIT: Scope.ANYONE,  # as themselves: the API sets the job's user to the verified identity
    Action.READ: Scope.ANYONE,
    Action.KILL: Scope.OWNER,
    Action.LOGS: Scope.OWNER,
    Action.EXEC: Scope.OWNER,
    Action.CREDITS: Scope.NOBODY,
    Action.FLEET: Scope.NOBODY,
    Action.USERS: Scope.NOBODY,
    Action.SERVE: Scope.NOBODY,
    Action.SCHEDULE: Scope.OWNER,
}
"""The spec's table for the `user` role; every action must have a row (tests/auth/test_rules.py)."""

WORKER_SCOPE: dict[Action, Scope] = {action: Scope.NOBODY for action in Action} | {Action.SERVE: Scope.ANYONE}
"""A worker credential serves as an agent and does nothing else."""

VERBS: dict[Action, str] = {
    Action.SUBMIT: "submit", Action.READ: "read the cluster's state", Action.KILL: "kill",
    Action.LOGS: "read the logs and results of", Action.EXEC: "exec into or profile the tasks of",
    Action.CREDITS: "set credits", Action.FLEET: "cordon, drain or terminate workers and slices",
    Action.USERS: "manage users and read the audit log", Action.SERVE: "serve as an agent",
    Action.SCHEDULE: "pause, unpause, trigger or delete",
}  # fmt: skip


@dataclass(frozen=True)
class Identity:
    """A verified caller: its user name and role (and how it was verified, for the audit log)."""

    name: str
    role: Role
    via: str = "token"  # "token" | "oidc" | "local" | "task"
    job: str = ""  # a task's credential: the job it speaks for (what it submits are that job's children)

    def __post_init__(self) -> None:
        if not self.name or any(ch.isspace() or ch == "/" for ch in self.name):
            raise ValueError(f"name: a user name has no spaces or '/', got {self.name!r}")
        object.__setattr__(self, "role", Role(self.role))


@dataclass(frozen=True)
class Decision:
    """Allowed, or why not (one line naming the action, the job and its owner)."""

    allowed: bool
    reason: str = ""


def decide(who: Identity, action: Action, *, job_id: str = "", owner: str = "") -> Decision:
    """Whether `who` may take `action` (on `job_id`, owned by `owner`), by the table above."""
    if who.role == Role.ADMIN:
        return Decision(True)
    scope = (USER_SCOPE if who.role == Role.USER else WORKER_SCOPE)[action]
    if scope == Scope.ANYONE or (scope == Scope.OWNER and owner and owner == who.name):
        return Decision(True)
    if job_id:
        what = "schedule" if action == Action.SCHEDULE else "job"
        reason = f"{who.name} ({who.role}) may not {VERBS[action]} {what} {job_id}: it belongs to {owner or 'nobody'}"
    elif who.role == Role.WORKER:
        reason = f"{who.name} is a worker credential: it serves as an agent and may not {VERBS[action]}"
    elif action == Action.SERVE:
        reason = f"{who.name} ({who.role}) may not {VERBS[action]}: admins and worker credentials only"
    else:
        reason = f"{who.name} ({who.role}) may not {VERBS[action]}: admins only"
    return Decision(False, reason)


def authorize(who: Identity, action: Action, *, job_id: str = "", owner: str = "") -> None:
    """Nothing when allowed; else `PermissionDeniedError` naming the action, the job and its owner."""
    decision = decide(who, action, job_id=job_id, owner=owner)
    if not decision.allowed:
        raise PermissionDeniedError(decision.reason, action=action.value, job_id=job_id, owner=owner)


def root_job(job_id: str) -> str:
    """The root of a job tree: a child's id is its parent's id, '/', its own name (iris/client/child_jobs.py)."""
    return job_id.split("/", 1)[0]


__all__ = ["USER_SCOPE", "Action", "Decision", "Identity", "Role", "Scope", "authorize", "decide", "root_job"]
