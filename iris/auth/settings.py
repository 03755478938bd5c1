"""The `auth:` key of a cluster config: team mode, and which credentials it accepts.

```yaml
auth: tokens                      # tokens `iris auth add-user` issues
auth:                             # the same, and OIDC/JWT bearer tokens of one issuer
  mode: tokens
  oidc: {issuer: https://idp.example.com, audience: iris}
```

Without the key the cluster runs as the embedded default: one user, no login (`Auth: none`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class OidcFile(BaseModel):
    """`auth.oidc`: the issuer whose JWKS signs accepted tokens, and the audience they must carry."""

    model_config = _FROZEN

    issuer: str
    audience: str | None = None


def _shorthand(value: Any) -> Any:
    """`auth: tokens` is `auth: {mode: tokens}`; `auth: none` the default."""
    return {"mode": value} if isinstance(value, str) else value


class AuthFile(BaseModel):
    """`auth:`: team mode's credentials (absent or `none`: the single-user local default)."""

    model_config = _FROZEN

    mode: Literal["none", "tokens"] = "none"
    oidc: OidcFile | None = None

    @property
    def team(self) -> bool:
        return self.mode == "tokens"

    def document(self) -> dict[str, Any] | None:
        """What a config file says for these settings (None: say nothing)."""
        if not self.team:
            return None
        return self.model_dump(exclude_none=True)


AuthField = Annotated[AuthFile, BeforeValidator(_shorthand)]
NO_AUTH = AuthFile()

__all__ = ["NO_AUTH", "AuthField", "AuthFile", "OidcFile"]
