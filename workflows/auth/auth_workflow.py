"""AuthWorkflow: the durable directory of team mode (users, token hashes, roles) and its audit log.

Iris has no database: this singleton entity workflow is where users and the audit trail live.
Rare changes (add a user, revoke one) are updates, because the caller needs the answer; audit
entries come as batched signals (the API flushes about once a second). Readers query the
directory and cache it for a couple of seconds (iris/auth/store.py). It continues as new when
Temporal suggests it, carrying `AuthState` whole.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from workflows.auth import auth_state as st
@workflow.defn(name="AuthWorkflow", versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class AuthWorkflow:
    @workflow.init
    def __init__(self, carried: st.AuthState | None) -> None:
        # The carried state is in place before any handler runs: an update can come in the new run's first task.
        self.state = carried if carried is not None else st.AuthState()

    @workflow.run
    async def run(self, carried: st.AuthState | None) -> None:
        await workflow.wait_condition(lambda: workflow.info().is_continue_as_new_suggested())
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(args=[self.state])

    @workflow.update(name=st.ADD_USER)
    def add_user(self, req: st.AddUser) -> st.AuthAnswer:
        return st.add_user(self.state, req)

    @workflow.update(name=st.REVOKE_USER)
    def revoke_user(self, req: st.RevokeUser) -> st.AuthAnswer:
        return st.revoke_user(self.state, req)

    @workflow.signal(name=st.RECORD_AUDIT)
    def record_audit(self, entries: list[st.AuditEntry]) -> None:
        st.record(self.state, entries)

    @workflow.query(name=st.DIRECTORY_QUERY)
    def directory(self) -> st.Directory:
        return st.Directory(list(self.state.users))

    @workflow.query(name=st.AUDIT_QUERY)
    def audit(self, req: st.AuditRequest) -> st.AuditLog:
        return st.audit_since(self.state, req)
