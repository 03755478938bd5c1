"""Task tokens (worker_agent/task_token.py): minted by agents with the control plane's key, checked by the API."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from iris.auth.errors import AuthenticationError
from iris.auth.rules import Identity, Role
from iris.auth.verify import TaskTokenVerifier
from worker_agent.object_store import open_blob_store
from worker_agent.task_token import KEY_BLOB, TaskTokenKeyMissingError, ensure_key, job_of, mint, read_key


def test_a_token_names_its_job_and_only_the_key_makes_one() -> None:
    key, other = b"k" * 32, b"o" * 32
    token = mint(key, "ana-job/child-1")
    assert token.startswith("iris-task:") and "." not in token  # not an issued token's prefix, not a JWT
    assert "ana-job/child-1" == job_of(key, token)
    assert job_of(other, token) is None
    assert job_of(key, token[:-1] + ("0" if token[-1] != "0" else "1")) is None
    for garbage in ("iris-task:", "iris-task:x", "iris-task:!!:00", "iris-task:a:b:c"):
        assert job_of(key, garbage) is None


def test_the_key_is_made_once_and_read_back(tmp_path: Path) -> None:
    blobs = open_blob_store(tmp_path.as_uri())
    with pytest.raises(TaskTokenKeyMissingError, match="no team-mode controller"):
        read_key(blobs)
    key = ensure_key(blobs)
    assert 32 == len(key) and key == ensure_key(blobs) == read_key(blobs) == blobs.get(KEY_BLOB)


def test_the_verifier_gives_the_jobs_user_while_it_runs() -> None:
    key = b"k" * 32
    states = {"job-1": ("ana", True, 100.0), "job-2": ("bob", False, 100.0)}

    async def state(job_id: str) -> tuple[str, bool, float]:
        return states[job_id]

    verifier = TaskTokenVerifier(lambda: key, state)

    async def check() -> None:
        assert Identity("ana", Role.USER, via="task", job="job-1") == await verifier.identify(mint(key, "job-1"))
        with pytest.raises(AuthenticationError, match="job job-2 has ended"):
            await verifier.identify(mint(key, "job-2"))
        with pytest.raises(AuthenticationError, match="no job job-3"):
            await verifier.identify(mint(key, "job-3"))
        with pytest.raises(AuthenticationError, match="not minted by this cluster"):
            await verifier.identify(mint(b"x" * 32, "job-1"))

    asyncio.run(check())


def test_a_revoked_users_running_jobs_stop_acting_as_them() -> None:
    """Revoking ana stops her tokens and her running jobs' task tokens alike (a task could otherwise submit,
    kill and read as her for as long as it runs); adding her again does not bring them back (they did)."""
    key = b"k" * 32

    async def state(job_id: str) -> tuple[str, bool, float]:
        return "ana", True, 100.0  # started at 100

    class Directory:
        roles: dict[str, str] = {"ana": "user"}
        began: dict[str, float] = {"ana": 50.0}

        async def role_of(self, name: str) -> str | None:
            return self.roles.get(name)

        async def life_began(self, name: str) -> float:
            return self.began.get(name, 0.0)

    directory = Directory()
    verifier = TaskTokenVerifier(lambda: key, state, directory)  # type: ignore[arg-type]

    async def check() -> None:
        assert "ana" == (await verifier.identify(mint(key, "job-1"))).name
        directory.roles["ana"] = ""
        with pytest.raises(AuthenticationError, match="user ana was revoked"):
            await verifier.identify(mint(key, "job-1"))
        directory.roles["ana"], directory.began["ana"] = "user", 150.0  # added again, after the job started
        with pytest.raises(AuthenticationError, match="user ana was revoked after job job-1 started"):
            await verifier.identify(mint(key, "job-1"))

    asyncio.run(check())
