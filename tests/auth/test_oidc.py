"""OIDC/JWT bearer tokens in team mode: checked against the issuer's JWKS, named by their claims, given Iris's role."""

from __future__ import annotations

import pytest

from iris import AuthenticationError
from iris.auth.rules import Identity, Role
from iris.auth.verify import OidcVerifier, TokenVerifier, Verifiers, oidc_name
from tests.test_codec_server import Issuer


class Roles:
    """The directory as the OIDC verifier asks it: a role by name ("" once revoked, None if unknown)."""

    def __init__(self, roles: dict[str, str]) -> None:
        self.roles = roles

    async def role_of(self, name: str) -> str | None:
        return self.roles.get(name)


async def test_issuer_signed_tokens_name_the_user_with_iris_role() -> None:
    """A token the issuer signed is the user its claims name, with the role Iris holds for that name (else user);
    a revoked name, an expired token or another audience is refused."""
    issuer = Issuer()
    await issuer.start()
    assert issuer.server is not None
    try:
        roles = Roles({})
        verifier = OidcVerifier(issuer.url, "iris", roles)  # type: ignore[arg-type]
        chain = Verifiers((TokenVerifier(roles), verifier))  # type: ignore[arg-type]
        assert Identity("ana", Role.USER, via="oidc") == await chain.identify(issuer.token(audience="iris"))
        roles.roles["ana"] = "admin"
        assert Role.ADMIN == (await chain.identify(issuer.token(audience="iris"))).role
        roles.roles["ana"] = ""
        with pytest.raises(AuthenticationError, match="revoked"):
            await chain.identify(issuer.token(audience="iris"))
        with pytest.raises(AuthenticationError, match=r"(?i)expired"):
            await chain.identify(issuer.token(audience="iris", expires_in=-120))
        with pytest.raises(AuthenticationError, match=r"(?i)audience"):
            await chain.identify(issuer.token(audience="temporal-ui"))
        with pytest.raises(AuthenticationError, match="no credential"):
            await chain.identify(None)
    finally:
        await issuer.server.close()


def test_the_user_a_token_names() -> None:
    """preferred_username, else the e-mail's local part, else sub."""
    assert "ana" == oidc_name({"preferred_username": "ana", "email": "x@y", "sub": "1"})
    assert "bob" == oidc_name({"email": "bob@example.com", "sub": "2"})
    assert "3" == oidc_name({"sub": "3"})
    with pytest.raises(AuthenticationError):
        oidc_name({})
