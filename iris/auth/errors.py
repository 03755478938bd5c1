"""The two refusals of team mode, both `PermissionError`s so callers that catch that still do.

A leaf module: the client, the CLI and the API server all raise or translate these.
"""

from __future__ import annotations


class AuthenticationError(PermissionError):
    """No credential, or one Iris does not accept (unknown, revoked, expired, wrongly signed)."""


class PermissionDeniedError(PermissionError):
    """A verified caller asked for something its role or the job's ownership does not allow.

    The message names the action, the job (if any) and its owner, so the refusal explains itself.
    """

    def __init__(self, message: str, *, action: str = "", job_id: str = "", owner: str = "") -> None:
        super().__init__(message)
        self.action = action
        self.job_id = job_id
        self.owner = owner
        self.audited = False  # the API audits every refusal once: where it has more to say, or else as it answers

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "permission denied"


AUTH_EXIT_CODE = 3
"""What the CLI exits with on either refusal (public-api.md)."""

__all__ = ["AUTH_EXIT_CODE", "AuthenticationError", "PermissionDeniedError"]
