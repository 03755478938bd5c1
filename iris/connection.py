"""How every Iris process reaches Temporal: one settings model for the client, CLI, controller and agents.

A team's Temporal is not the embedded dev server: it has TLS (often mutual TLS with a client
certificate), or it is Temporal Cloud with an API key, and a namespace of its own. All of that is
read here, once, from `IRIS_TEMPORAL_*` environment variables (or the matching CLI options), so
every process connects the same way. Secrets (the API key, the private key's path is harmless) are
`SecretStr` and `describe()` is the only form that reaches logs: it says *that* TLS or a key is
used, never the key.

The same settings name who is submitting: with mTLS the client certificate's subject CN, with an
API key the key's JWT subject, else the local user name. The server authenticated that identity;
`$USER` is only a claim.
"""

from __future__ import annotations

import asyncio
import base64
import getpass
import json
import re
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from iris import exit_grace
from iris.connection_env import ADDRESS_ENV as ADDRESS_ENV
from iris.connection_env import ENV_PREFIX as ENV_PREFIX
from iris.connection_env import STORE_ENV as STORE_ENV

if TYPE_CHECKING:  # the SDK is imported where a client is made (`connect_client`)
    from temporalio.client import Client, Interceptor
    from temporalio.converter import DataConverter
    from temporalio.runtime import Runtime
    from temporalio.service import TLSConfig

_ADDRESS_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}$")


class TemporalSettings(BaseSettings):
    """Where Temporal is and how to authenticate; every field also reads `IRIS_TEMPORAL_<FIELD>`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore")

    address: str | None = Field(default=None, description="HOST:PORT of the frontend; None = local cluster")
    namespace: str = "default"
    tls: bool | None = Field(default=None, description="force TLS on/off; default: on when any TLS file or key is set")
    tls_ca: Path | None = Field(default=None, description="PEM CA bundle that signed the server's certificate")
    tls_cert: Path | None = Field(default=None, description="PEM client certificate (mutual TLS)")
    tls_key: Path | None = Field(default=None, description="PEM private key of the client certificate")
    tls_server_name: str | None = Field(default=None, description="name to verify the server certificate against")
    api_key: SecretStr | None = Field(default=None, description="Temporal Cloud API key")
    api_key_file: Path | None = Field(default=None, description="a file holding the API key (instead of api_key)")

    @field_validator("address")
    @classmethod
    def _check_address(cls, value: str | None) -> str | None:
        if value is not None and not _ADDRESS_RE.match(value):
            raise ValueError(f"must be HOST:PORT, e.g. temporal.example.com:7233, got {value!r}")
        return value

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, value: str) -> str:
        if not value or len(value) > 255 or any(c.isspace() for c in value):
            raise ValueError(f"must be a non-empty name without spaces, got {value!r}")
        return value

    @field_validator("tls_ca", "tls_cert", "tls_key", "api_key_file")
    @classmethod
    def _check_file(cls, value: Path | None) -> Path | None:
        if value is not None:
            value = value.expanduser()
            if not value.is_file():
                raise ValueError(f"no readable file at {value}")
        return value

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> TemporalSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError(
                f"{ENV_PREFIX}TLS_CERT and {ENV_PREFIX}TLS_KEY go together (a client certificate needs its key)"
            )
        return self

    @classmethod
    def load(cls, names: Mapping[str, str] | None = None, **overrides: Any) -> TemporalSettings:
        """Settings from the environment, with the non-None `overrides` (CLI options, a client's arguments) on top.

        A bad value is a ValueError in one line naming where it came from: `names[field]` when given (the CLI
        says `--temporal` for a flag it was typed as), else the argument's own name for an override, else the
        environment variable. Naming the variable for a value typed as a flag sent the user to the wrong place.
        """
        given = {k: v for k, v in overrides.items() if v is not None}
        try:
            return cls(**given)
        except ValidationError as e:
            first = e.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else ""
            source = (names or {}).get(name) or (name if name in given else f"{ENV_PREFIX}{name.upper()}")
            where = f"{source}: " if name else ""
            raise ValueError(f"{where}{first['msg'].removeprefix('Value error, ')}") from None

    def api_key_value(self) -> str | None:
        """The API key: `api_key`, else the stripped contents of `api_key_file`, else None."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_file is not None:
            return self.api_key_file.read_text().strip() or None
        return None

    # -- connecting ------------------------------------------------------------------------------

    @property
    def uses_tls(self) -> bool:
        if self.tls is not None:
            return self.tls
        return any(v is not None for v in (self.tls_ca, self.tls_cert, self.api_key, self.api_key_file))

    def tls_config(self) -> TLSConfig | bool:
        """The SDK's TLS settings: False (plain), True (system roots) or a TLSConfig with our files."""
        if not self.uses_tls:
            return False
        if self.tls_ca is None and self.tls_cert is None and self.tls_server_name is None:
            return True
        from temporalio.service import TLSConfig

        return TLSConfig(
            server_root_ca_cert=self.tls_ca.read_bytes() if self.tls_ca else None,
            client_cert=self.tls_cert.read_bytes() if self.tls_cert else None,
            client_private_key=self.tls_key.read_bytes() if self.tls_key else None,
            domain=self.tls_server_name,
        )

    async def connect(
        self,
        *,
        data_converter: DataConverter | None = None,
        runtime: Runtime | None = None,
        address: str | None = None,
        interceptors: Sequence[Interceptor] = (),
    ) -> Client:
        """A Temporal client for these settings (RuntimeError when the server cannot be reached)."""
        target = address or self.address
        if target is None:
            raise ValueError(f"{ENV_PREFIX}ADDRESS: no Temporal address given (--temporal HOST:PORT)")
        return await connect_client(
            target,
            namespace=self.namespace,
            data_converter=data_converter,
            runtime=runtime,
            tls=self.tls_config(),
            api_key=self.api_key_value(),
            identity=f"{self.user()}@{socket.gethostname()}",
            interceptors=interceptors,
        )

    async def connect_until_up(self, timeout: float | None = 60.0, **kwargs: Any) -> Client:
        """`connect`, retrying each second while the server is not up yet (e.g. restarted together with us).

        With `timeout` None, for as long as it takes (a worker agent never gives up on the control plane).
        """
        import structlog  # not at the top: a task importing Iris does not load it (iris/__init__)

        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            try:
                return await self.connect(**kwargs)
            except RuntimeError as err:  # the SDK raises RuntimeError when it cannot connect
                if deadline is not None and loop.time() > deadline:
                    raise
                structlog.get_logger("iris.connection").warning("temporal_unreachable", **self.describe(),
                                                                error=str(err))  # fmt: skip
                await asyncio.sleep(1.0)

    # -- who is asking ---------------------------------------------------------------------------

    def user(self) -> str:
        """The submitting user: the authenticated identity when there is one, else the login name."""
        return self.authenticated_user() or local_user()

    def authenticated_user(self) -> str | None:
        """The connection's authenticated identity (mTLS or API-key subject), None without one."""
        if self.tls_cert is not None:
            subject = certificate_subject(self.tls_cert.read_bytes())
            if subject:
                return subject
        key = self.api_key_value()
        if key is not None:
            subject = api_key_subject(key)
            if subject:
                return subject
        return None

    def describe(self) -> dict[str, Any]:
        """What may be logged: where and how we connect, never a secret."""
        return {
            "temporal": self.address,
            "namespace": self.namespace,
            "tls": self.uses_tls,
            "mtls": self.tls_cert is not None,
            "api_key": self.api_key is not None or self.api_key_file is not None,
        }


async def connect_client(
    address: str,
    *,
    namespace: str = "default",
    data_converter: DataConverter | None = None,
    runtime: Runtime | None = None,
    tls: TLSConfig | bool = False,
    api_key: str | None = None,
    identity: str | None = None,
    interceptors: Sequence[Interceptor] = (),
) -> Client:
    """The one way an Iris process opens a Temporal client (the local cluster's own checks included).

    Every client asks a query again that a controller refused for looking ahead (iris.query_retry), and gets
    Iris's data converter: payloads encrypted under the process's codec key when
    IRIS_CODEC_KEY(_FILE) is set, and one line naming the key ids for a payload it cannot read.
    A client built any other way cannot read an encrypted cluster's answers.
    """
    from temporalio.client import Client

    from iris.query_retry import QueryRetry
    from iris.security import codec

    kwargs: dict[str, Any] = {}
    if runtime is not None:
        kwargs["runtime"] = runtime
    if identity is not None:
        kwargs["identity"] = identity
    exit_grace.client_opened()  # its exit lets the SDK's threads finish their calls (iris/exit_grace.py)
    return await Client.connect(
        address,
        namespace=namespace,
        data_converter=data_converter or codec.data_converter(codec.load_key()),
        tls=tls,
        api_key=api_key,
        interceptors=[QueryRetry(), *interceptors],
        **kwargs,
    )


def certificate_subject(pem: bytes) -> str:
    """The common name of a PEM certificate's subject (the whole subject if it has no CN); '' if unreadable."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        return ""
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if names:
        value = names[0].value
        return value if isinstance(value, str) else value.decode()
    return cert.subject.rfc4514_string()


def api_key_subject(key: str) -> str:
    """The `sub` claim of an API key that is a JWT (Temporal Cloud's are); '' for an opaque key.

    Read without verifying the signature: the server verifies it on every call, this only names
    the user the server will see.
    """
    parts = key.split(".")
    if len(parts) != 3:
        return ""
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, TypeError):
        return ""
    subject = claims.get("sub") if isinstance(claims, dict) else None
    return subject if isinstance(subject, str) else ""


def local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
