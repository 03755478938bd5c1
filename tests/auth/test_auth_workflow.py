"""The AuthWorkflow on a real dev server: users, revocation and the audit log survive continue-as-new."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import time
import uuid
from pathlib import Path

from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from iris.auth.store import Directory
from iris.auth.tokens import token_hash
from iris.controller.control_plane import workflow_runner
from iris.deploy.worker_versioning import deployment_config, promote
from tests.support import TEMPORAL, TEST_BUILD, WAL_ARGS
from workflows.auth import auth_state as st
from workflows.auth.auth_workflow import AuthWorkflow

TINY_HISTORY = ["--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=20"]


async def test_directory_survives_continue_as_new() -> None:
    """Users added by update and 40 audit signals (past a 20-event threshold): after continue-as-new the
    directory still verifies the token, a revoked user's token no longer does (within 10 s even for a copy read
    before the revocation), and the audit log is whole."""
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=str(TEMPORAL),
                                                dev_server_extra_args=[*WAL_ARGS, *TINY_HISTORY])  # fmt: skip
    queue = f"auth-{uuid.uuid4().hex[:8]}"
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as executor:
            async with Worker(
                env.client,
                task_queue=queue,
                workflows=[AuthWorkflow],
                activity_executor=executor,
                workflow_runner=workflow_runner(),
                deployment_config=deployment_config(TEST_BUILD),
            ):
                await promote(env.client, TEST_BUILD)
                handle = await env.client.start_workflow(AuthWorkflow.run, None, id=st.AUTH_WORKFLOW_ID,
                                                         task_queue=queue)  # fmt: skip
                first_run = handle.result_run_id or ""
                for name, role in (("admin", "admin"), ("ana", "user"), ("bob", "user")):
                    answer = await handle.execute_update(st.ADD_USER, st.AddUser(name, role, token_hash(f"t-{name}"),
                                                         1.0), result_type=st.AuthAnswer)  # fmt: skip
                    assert answer.ok
                for i in range(40):
                    await handle.signal(st.RECORD_AUDIT, [st.AuditEntry(float(10 + i), "ana", "submit", f"job-{i}")])
                other_controller = Directory(env.client)  # a copy read before the revocation, never told of it
                assert await other_controller.user_of("t-bob") is not None
                answer = await handle.execute_update(st.REVOKE_USER, st.RevokeUser("bob", 60.0, by="admin"),
                                                     result_type=st.AuthAnswer)  # fmt: skip
                assert answer.ok
                revoked_at = time.monotonic()
                while await other_controller.user_of("t-bob") is not None:
                    assert time.monotonic() - revoked_at < 10, "a revoked token still worked after 10 s"
                    await asyncio.sleep(0.2)

                async def continued() -> bool:
                    desc = await env.client.get_workflow_handle(st.AUTH_WORKFLOW_ID).describe()
                    return desc.run_id != first_run

                for _ in range(100):
                    if await continued():
                        break
                    await asyncio.sleep(0.1)
                assert await continued()
                directory = Directory(env.client)
                ana = await directory.user_of("t-ana")
                assert ana is not None and "ana" == ana.name
                assert await directory.user_of("t-bob") is None
                log = await env.client.get_workflow_handle(st.AUTH_WORKFLOW_ID).query(
                    st.AUDIT_QUERY, st.AuditRequest(), result_type=st.AuditLog
                )
                assert [f"job-{i}" for i in range(39, -1, -1)] == [
                    e.subject for e in log.entries if e.action == "submit"
                ]
                await _record(env, first_run)
    finally:
        await env.shutdown()


async def _record(env: WorkflowEnvironment, run_id: str) -> None:
    """With IRIS_RECORD_HISTORIES=DIR, save the first run's history there (tests/test_replay_recorded.py)."""
    folder = os.environ.get("IRIS_RECORD_HISTORIES")
    if not folder:
        return
    history = await env.client.get_workflow_handle(st.AUTH_WORKFLOW_ID, run_id=run_id).fetch_history()
    fixture = {"workflow_id": st.AUTH_WORKFLOW_ID, "history": json.loads(history.to_json())}
    (Path(folder) / "AuthWorkflow.json").write_text(json.dumps(fixture))
