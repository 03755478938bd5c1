"""The `auth:` key of a cluster config: team mode, and which credentials it accepts.

```yaml
auth: tokens                      # tokens `iris auth add-user` issues
auth:                             # the same, and OIDC/JWT bearer tokens of one issuer
  mode: tokens
  oidc: {issuer: https://idp.example.com, audience: iris}
auth:                             # and the dashboard signs users in at the issuer, as the client `audience`
  mode: tokens
  oidc: {issuer: https://idp.example.com, audience: iris, client_secret_file: /etc/iris/oidc-secret}
auth:                             # a task's token refused within 1 s of its job's end (default 5 s)
  mode: tokens
  task_token_recheck: 1s
```

Without the key the cluster runs as the embedded default: one user, no login (`Auth: none`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, field_validator

from iris.units import parse_duration

_FROZEN = ConfigDict(extra="forbid", frozen=True)
DEFAULT_TASK_TOKEN_RECHECK_SECONDS = 5.0
MAX_TASK_TOKEN_RECHECK_SECONDS = 60.0


class OidcFile(BaseModel):
    """`auth.oidc`: the issuer whose JWKS signs accepted tokens, and the audience they must carry.

    With an audience, the dashboard's login page also offers signing in at the issuer, as the OIDC client
    of that id (authorization code with PKCE; `client_secret_file` for an issuer that wants a secret).
    """

    model_config = _FROZEN

    issuer: str
    audience: str | None = None
    client_secret_file: Path | None = None

    @field_validator("issuer")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError(f"must be the issuer's URL (https://...), got {value!r}")
        return value


def _shorthand(value: Any) -> Any:
    """`auth: tokens` is `auth: {mode: tokens}`; `auth: none` the default."""
    return {"mode": value} if isinstance(value, str) else value


class AuthFile(BaseModel):
    """`auth:`: team mode's credentials (absent or `none`: the single-user local default)."""

    model_config = _FROZEN

    mode: Literal["none", "tokens"] = "none"
    oidc: OidcFile | None = None
    # How long the API takes a job's user and state as read when checking its tasks' tokens: a task token
    # still works this long after its job ended, at most (shorter: one more query per busy job that often).
    task_token_recheck: Annotated[float, BeforeValidator(lambda v: parse_duration(v, ""))] = (
        DEFAULT_TASK_TOKEN_RECHECK_SECONDS
    )

    @field_validator("task_token_recheck")
    @classmethod
    def _recheck(cls, value: float) -> float:
        if not 0 < value <= MAX_TASK_TOKEN_RECHECK_SECONDS:  # NaN too
            raise ValueError(f"must be > 0 and at most {MAX_TASK_TOKEN_RECHECK_SECONDS:g}s, got {value:g}s")
        return value

    @property
    def team(self) -> bool:
        return self.mode == "tokens"

    def oidc_client_secret(self) -> str | None:
        """The dashboard's OIDC client secret, read from `oidc.client_secret_file` (None without one)."""
        path = self.oidc.client_secret_file if self.oidc is not None else None
        if path is None:
            return None
        try:
            return path.expanduser().read_text().strip() or None
        except OSError as err:
            raise ValueError(f"auth.oidc.client_secret_file: cannot read {path}: {err.strerror or err}") from None

    def document(self) -> dict[str, Any] | None:
        """What a config file says for these settings (None: say nothing)."""
        if not self.team:
            return None
        document = self.model_dump(mode="json", exclude_none=True)
        if self.task_token_recheck == DEFAULT_TASK_TOKEN_RECHECK_SECONDS:
            del document["task_token_recheck"]
        return document


AuthField = Annotated[AuthFile, BeforeValidator(_shorthand)]
NO_AUTH = AuthFile()

__all__ = ["NO_AUTH", "AuthField", "AuthFile", "OidcFile"]
