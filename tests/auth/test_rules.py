"""The rules of team mode without a cluster: the role table, the refusals' words, tokens, the directory's state."""

from __future__ import annotations

from pathlib import Path

import pytest

from iris import AuthenticationError, PermissionDeniedError
from iris.auth.rules import USER_SCOPE, Action, Identity, Role, Scope, authorize, decide
from iris.auth.settings import AuthFile
from iris.auth.tokens import looks_like_iris_token, new_token, token_hash
from iris.cli.error_lines import describe
from iris.config.cluster_file import parse_config
from workflows.auth import auth_state as st

ADMIN = Identity("root", Role.ADMIN)
ANA = Identity("ana", Role.USER)
BOB = Identity("bob", Role.USER)
AGENT = Identity("agent", Role.WORKER)


def test_every_action_has_a_row() -> None:
    """The user role's table covers every action, so no action is decided by a default."""
    assert set(Action) == set(USER_SCOPE)


@pytest.mark.parametrize("action", list(Action))
def test_admin_may_do_everything_and_a_worker_only_serve(action: Action) -> None:
    """An admin passes every check; a worker credential passes only SERVE (it serves as an agent, nothing else)."""
    assert decide(ADMIN, action, job_id="j", owner="ana").allowed
    assert (action == Action.SERVE) == decide(AGENT, action, job_id="j", owner="agent").allowed
    assert (action == Action.SERVE) == decide(AGENT, action).allowed


def test_a_user_may_not_serve_as_an_agent() -> None:
    """Enrolling as an agent is for worker credentials (and admins): a user is refused, in words that say so."""
    with pytest.raises(PermissionDeniedError, match="ana \\(user\\) may not serve as an agent: admins and worker"):
        authorize(ANA, Action.SERVE)


@pytest.mark.parametrize("action", [a for a, scope in USER_SCOPE.items() if scope == Scope.OWNER])
def test_job_actions_are_the_owners(action: Action) -> None:
    """Kill, logs/results and exec/profile: the owner may, another user is refused naming the action, job and owner."""
    authorize(ANA, action, job_id="train-1", owner="ana")
    with pytest.raises(PermissionDeniedError) as refused:
        authorize(BOB, action, job_id="train-1", owner="ana")
    message = str(refused.value)
    assert "bob" in message and "train-1" in message and "ana" in message
    assert (action.value, "train-1", "ana") == (refused.value.action, refused.value.job_id, refused.value.owner)
    assert isinstance(refused.value, PermissionError)


@pytest.mark.parametrize("action", [Action.CREDITS, Action.FLEET, Action.USERS])
def test_operator_actions_are_admins_only(action: Action) -> None:
    """Credits, cordon/drain/slice terminate and user management: a user is refused even for itself."""
    with pytest.raises(PermissionDeniedError, match="admins only"):
        authorize(ANA, action, owner="ana")


def test_refusals_exit_3_on_one_line() -> None:
    """The CLI turns both refusals into one line and exit code 3."""
    assert describe(PermissionDeniedError("bob may not kill job j: it belongs to ana")) == (
        "bob may not kill job j: it belongs to ana",
        3,
    )
    assert describe(AuthenticationError("unknown or revoked token"))[1] == 3


def test_tokens_are_random_and_kept_as_hashes() -> None:
    """Two tokens differ; what is stored is a hash that does not contain the token."""
    a, b = new_token("ana"), new_token("ana")
    assert a != b and looks_like_iris_token(a)
    assert token_hash(a) == token_hash(a) and a not in token_hash(a) and len(token_hash(a)) == 64


def test_directory_state() -> None:
    """Bootstrap works once; a second user of a name is refused until revoked; revoke drops every token."""
    state = st.AuthState()
    assert st.add_user(state, st.AddUser("admin", "admin", "h1", 1.0, bootstrap=True)).ok
    assert not st.add_user(state, st.AddUser("eve", "admin", "h2", 2.0, bootstrap=True)).ok
    assert st.add_user(state, st.AddUser("ana", "user", "h3", 3.0, by="admin")).ok
    assert st.add_user(state, st.AddUser("ana", "user", "h3", 3.0, by="admin")).ok  # a redelivered update
    assert not st.add_user(state, st.AddUser("ana", "user", "h4", 4.0, by="admin")).ok
    assert st.revoke_user(state, st.RevokeUser("ana", 5.0, by="admin")).ok
    ana = st.find_user(state, "ana")
    assert ana is not None and ana.token_hashes == [] and ana.revoked_at == 5.0
    assert not st.revoke_user(state, st.RevokeUser("nobody", 6.0)).ok
    actions = [e.action for e in st.audit_since(state, st.AuditRequest()).entries]
    assert ["revoke", "add-user", "bootstrap"] == actions
    # Added again: a new life, from which its jobs' task tokens date (those of older jobs stay dead).
    assert st.add_user(state, st.AddUser("ana", "user", "h5", 7.0, by="admin")).ok
    assert (7.0, 0.0) == (ana.created_at, ana.revoked_at)


def test_an_sso_name_can_be_revoked_and_the_last_admin_cannot_be() -> None:
    """With OIDC, a name Iris issued no token to (an SSO user's) is recorded revoked; the last admin holding a
    token cannot revoke itself (nobody could manage users after), while another admin exists it can."""
    state = st.AuthState()
    assert st.add_user(state, st.AddUser("admin", "admin", "h1", 1.0, bootstrap=True)).ok
    assert st.revoke_user(state, st.RevokeUser("dana@example.com", 2.0, by="admin", unknown_ok=True)).ok
    dana = st.find_user(state, "dana@example.com")
    assert dana is not None and dana.revoked_at == 2.0
    last = st.revoke_user(state, st.RevokeUser("admin", 3.0, by="admin"))
    assert not last.ok and "admin is the last admin" in last.reason
    assert st.add_user(state, st.AddUser("ops", "admin", "h2", 4.0, by="admin")).ok
    assert st.revoke_user(state, st.RevokeUser("admin", 5.0, by="ops")).ok


def test_audit_is_newest_first_by_time_whatever_order_entries_arrive_in() -> None:
    """The API flushes its entries in batches a few seconds late; user changes are recorded at once."""
    state = st.AuthState()
    st.record(state, [st.AuditEntry(10.0, "ana", "submit", "j1"), st.AuditEntry(12.0, "ana", "kill", "j1")])
    assert st.add_user(state, st.AddUser("bo", "user", "h1", 11.0, by="admin")).ok
    st.record(state, [st.AuditEntry(13.0, "bo", "submit", "j2")])
    entries = st.audit_since(state, st.AuditRequest()).entries
    assert [(13.0, "submit"), (12.0, "kill"), (11.0, "add-user"), (10.0, "submit")] == [
        (e.at, e.action) for e in entries
    ]


def test_audit_is_bounded() -> None:
    """The audit log keeps the newest MAX_AUDIT entries."""
    state = st.AuthState()
    st.record(state, [st.AuditEntry(float(i), "ana", "submit", f"j{i}") for i in range(st.MAX_AUDIT + 10)])
    assert len(state.audit) == st.MAX_AUDIT
    newest = st.audit_since(state, st.AuditRequest(since=float(st.MAX_AUDIT + 5))).entries
    assert [f"j{i}" for i in range(st.MAX_AUDIT + 9, st.MAX_AUDIT + 4, -1)] == [e.subject for e in newest]


def test_config_auth_key() -> None:
    """`auth: tokens` and the long form both turn team mode on; without it there is none; typos are named."""
    assert parse_config({"auth": "tokens"}, "c.yaml").auth.team
    long = parse_config({"auth": {"mode": "tokens", "oidc": {"issuer": "https://idp", "audience": "iris"}}}, "c.yaml")
    assert long.auth.oidc is not None and long.auth.oidc.audience == "iris"
    assert parse_config({}, "c.yaml").auth == AuthFile()
    with pytest.raises(ValueError, match=r"c.yaml: auth.mode"):
        parse_config({"auth": "token"}, "c.yaml")


def test_config_oidc_sign_in_settings(tmp_path: Path) -> None:
    """The dashboard's OIDC client secret is read from its file (kept in the record as a path, never the secret);
    an issuer that is not a URL and an unreadable secret file are named."""
    secret = tmp_path / "oidc-secret"
    secret.write_text("s3cret\n")
    oidc = {"issuer": "https://idp.example.com/", "audience": "iris", "client_secret_file": str(secret)}
    auth = parse_config({"auth": {"mode": "tokens", "oidc": oidc}}, "c.yaml").auth
    assert "s3cret" == auth.oidc_client_secret()
    assert auth.oidc is not None and "https://idp.example.com/" == auth.oidc.issuer
    assert str(secret) == auth.document()["oidc"]["client_secret_file"]  # type: ignore[index]
    with pytest.raises(ValueError, match=r"c.yaml: auth.oidc.issuer"):
        parse_config({"auth": {"mode": "tokens", "oidc": {"issuer": "idp.example.com"}}}, "c.yaml")
    secret.unlink()
    with pytest.raises(ValueError, match=r"auth\.oidc\.client_secret_file: cannot read"):
        auth.oidc_client_secret()


def test_a_token_file_of_several_lines_is_an_authentication_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is not one token (a file of two lines, a value with a space) is refused naming where it came from,
    before any request (an HTTP library would refuse the header with a message about header injection)."""
    from iris.auth.remote import resolve_token

    monkeypatch.delenv("IRIS_TOKEN", raising=False)
    path = tmp_path / "token"
    path.write_text("iris_ana_x\nsecond line\n")
    monkeypatch.setenv("IRIS_TOKEN_FILE", str(path))
    with pytest.raises(AuthenticationError, match=rf"^IRIS_TOKEN_FILE \({path}\): not one token"):
        resolve_token()
    path.write_text("\n  iris_ana_x  \n\n")
    assert "iris_ana_x" == resolve_token()
    with pytest.raises(AuthenticationError, match=r"^token=: not one token"):
        resolve_token("iris ana")
