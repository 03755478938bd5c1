"""Agents outlive control-plane outages: the controller or the Temporal server away for longer than any timeout.

An agent exits only when told to (SIGTERM) or on a configuration error; every failure to
reach Temporal or the scheduler is retried until the control plane is back.

The dead-server and killed-job tests share one cluster (a cluster each cost 4-6 s a test on a loaded machine):
their agents declare the same timeouts, the killed-job test's job runs on a worker of its own, and it ends with
that worker back; the dead-server test, which leaves its stopped agent down, comes last. The dead-controller
test's agents and dev server are set up for it: it starts its own, first.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.contracts import worker_workflow_id
from iris import Constraint, JobState, ResourceSpec
from tests.support import holds_throughout, logged
from worker_agent.agent import SESSION_SILENCE_SECONDS
from workflows.fleet.worker_workflow import session_heartbeat_timeout

from .conftest import (
    FaultCluster,
    MakeCluster,
    group,
    lines,
    module_cluster,
    pid_running,
    wait_until,
)
from .test_component_faults import FENCE, HEARTBEAT, LEASE, LOST_WORKER_AGENTS, read_runs, record_run_until

ONE_CPU = ResourceSpec(cpu=1, memory="100m")
# The agents of the dead-controller test ask again after this long without an answer (product default 20 s):
# the test waits for one unanswered registration, so the outage lasts this long, not 20 s.
ANSWER_WAIT = 2.0
# They declare this heartbeat timeout (the default is 10 s): their sessions time out after 0.6 of it, 3 s, not 6 s,
# so the paused agent's session is lost that much sooner.
SESSION_AGENT_HEARTBEAT = 5.0
# Its controllers' sticky timeout (3 s with kills_controller alone): after the restart, the workflows the dead
# controller ran last (the scheduler's, the job's and its task's) wait this long for it before the new one runs them.
STICKY = 1.0
# The dead-server test's agents declare the lost-worker tests' heartbeat timeout and lease (LOST_WORKER_AGENTS: 4.5 s
# and 3 s; the defaults are 10 s and 10 s), so its outage outlasts every timeout in play in 8 s, not 15 s: the agent
# gives the attempt up 3 s after its last renewal (renewed every 1 s), the server loses the session 0.6 x 4.5 = 2.7 s
# and the attempt 4.5 s after their last heartbeats, and the task workflow waits FENCE (0.5 s) more for the lease,
# 5 s in all (lease + margin); 8 s leaves 3 s beyond the longest on a loaded machine.
OUTAGE = HEARTBEAT + FENCE + 3.0
assert max(LEASE, session_heartbeat_timeout(HEARTBEAT).total_seconds(), HEARTBEAT + FENCE) + 3.0 <= OUTAGE
# The shared cluster's workers: the killed-job test's victim, and the dead-server test's (`pool` "t": its job runs
# on one of them, and it stops `spare-0` while the server is away).
FLEET = (group("victim", cpu=1, role="victim"), group("cpu", cpu=1, count=2, pool="t"), group("spare", cpu=1, pool="t"))


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    """The module's cluster for the tests that share one. Its agents declare the lost-worker tests' heartbeat
    timeout and lease (LOST_WORKER_AGENTS)."""
    with module_cluster(tmp_path_factory.mktemp("iris-outages"), FLEET, LOST_WORKER_AGENTS) as fc:
        yield fc


def registered_session(log: Path) -> str | None:
    """The session an agent last registered, from its log (None before it logged one)."""
    sessions = [e["session"] for e in map(json.loads, (ln for ln in lines(log) if ln.startswith("{")))
                if e.get("event") == "worker_registered"]  # fmt: skip
    return str(sessions[-1]) if sessions else None


async def _timed_out(address: str, workflow_id: str) -> bool:
    """Whether the server has timed out an activity of this workflow (it records that with no worker running)."""
    client = await Client.connect(address)
    events = client.get_workflow_handle(workflow_id).fetch_history_events()
    return any([e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT async for e in events])


def test_agents_outlive_a_dead_controller_while_they_register_again(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the controller dead past the session heartbeat timeout and a registration's answer wait, an agent
    whose session was lost (paused past the heartbeat timeout) keeps trying to register instead of exiting;
    once the controller is back every agent is healthy and the task that ran through the outage finishes once."""
    monkeypatch.setenv("IRIS_REGISTRATION_ANSWER_WAIT_SECONDS", str(ANSWER_WAIT))  # the agents inherit IRIS_*
    monkeypatch.setenv("IRIS_HEARTBEAT_TIMEOUT_SECONDS", str(SESSION_AGENT_HEARTBEAT))
    c: FaultCluster = make_cluster(
        group("run", cpu=1, role="run"), group("paused", cpu=1, role="paused"), kills_controller=True,
        sticky_timeout=STICKY,
    )  # fmt: skip
    on_run = [Constraint("role", "EQ", "run")]
    gate = c.work / "go"  # the task runs through the outage and ends when the test says
    job = c.client.submit(record_run_until, str(c.work), str(gate), resources=ONE_CPU, constraints=on_run)
    runs = c.work / "runs"
    wait_until(lambda: lines(runs), what="the task started")
    # Waited for: an agent that came up before the scheduler may be healthy before it logs its registration (the
    # new scheduler asked its monitor to register it again while the agent itself waited out a retry).
    session = wait_until(lambda: registered_session(c.local.log_path("worker-paused-0")), what="paused-0 registered")
    monitor = worker_workflow_id("paused-0", session)

    assert c.local.kill_process("controller", signal.SIGKILL, wait=5)
    assert c.local.kill_process("paused-0", signal.SIGSTOP)
    wait_until(  # the server ended its session (its 3 s heartbeat timeout passed); the controller cannot hear it
        lambda: asyncio.run(_timed_out(c.info.address, monitor)),
        timeout=session_heartbeat_timeout(SESSION_AGENT_HEARTBEAT).total_seconds() + 30, interval=0.2,
        what="the paused agent's session timed out",
    )  # fmt: skip
    retries = logged(c.local.log_path("worker-paused-0"), "registration_retry")
    assert c.local.kill_process("paused-0", signal.SIGCONT)
    wait_until(  # it registers again, no controller answers, and it says it will ask again
        lambda: logged(c.local.log_path("worker-paused-0"), "registration_retry") > retries,
        timeout=ANSWER_WAIT + 30, what="a registration with no answer, to be tried again",
    )  # fmt: skip
    assert ["temporal", "worker-paused-0", "worker-run-0"] == c.alive()
    back_at = time.monotonic()
    c.local.restart_process("controller")
    assert [] == [ln for ln in lines(runs) if " end " in ln]  # the task ran through the outage
    gate.touch()  # it ends while the agents are made healthy again: neither waits for the other

    wait_until(lambda: c.healthy("paused-0") and c.healthy("run-0"), timeout=60, what="both workers healthy")
    print(f"\ncontroller restart -> every agent healthy: {time.monotonic() - back_at:.1f} s")
    status = job.wait(timeout=90)
    assert JobState.SUCCEEDED == status.state
    assert [0] == job.results()
    assert [(0, 0)] == sorted(read_runs(runs))  # once, never retried
    assert ["controller", "temporal", "worker-paused-0", "worker-run-0"] == c.alive()


def test_a_job_killed_as_its_worker_dies_ends_killed_and_runs_no_more(
    c: FaultCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job killed right after its worker was SIGKILLed ends KILLED once the attempt times out; the timeout
    is not taken for a preemption to retry (the kill wins), so no second attempt ever starts."""
    # The cluster's agents declare LOST_WORKER_AGENTS: the attempt times out after 4.5 s, not 10 s.
    for name, value in LOST_WORKER_AGENTS.items():
        monkeypatch.setenv(name, value)  # the restarted agent inherits IRIS_*, as the cluster's did
    runs = c.work / "runs"
    job = c.client.submit_command(
        ["sh", "-c", f'echo "$IRIS_ATTEMPT" >> {runs}; exec sleep 600'], resources=ONE_CPU,
        constraints=[Constraint("role", "EQ", "victim")], max_retries_preemption=5,
    )  # fmt: skip
    wait_until(lambda: lines(runs), what="attempt 0 started")
    assert c.local.kill_process("victim-0", signal.SIGKILL, wait=5)
    assert job.terminate()
    assert JobState.KILLED == job.wait(timeout=60, raise_on_failure=False).state
    c.local.start_worker(c.specs["victim-0"])  # a place for a retry, were there one
    # The scheduler has counted the victim back and holds nothing of the job to place on it: its chance to
    # start a second attempt came and went (the job's task workflows are closed, so none can come later).
    wait_until(lambda: c.healthy("victim-0") and not any(r.job_id == job.job_id for r in c.client.queue()),
               timeout=30, what="victim back, nothing of the job queued")  # fmt: skip
    assert () == c.workers()["victim-0"].running_tasks
    assert ["0"] == lines(runs)


def test_agents_outlive_a_dead_temporal_server_and_stop_promptly_while_it_is_away(c: FaultCluster) -> None:
    """With the dev server dead under a running task for longer than the agents' timeouts (OUTAGE: it was 15 s
    with the default ones), no agent exits, the task completes after the server is back; and an agent told to
    stop (SIGTERM) while the server is away exits within seconds."""
    # The task runs until the test lets it end, once the server is back: the attempt the outage cost (its lease ran
    # out) runs again then, and ends at once rather than after a fixed time (it was `sleep 20`, twice).
    gate = c.work / "go"
    job = c.client.submit_command(
        ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"], resources=ONE_CPU,
        constraints=[Constraint("pool", "EQ", "t")],
    )  # fmt: skip
    wait_until(lambda: c.status(job.job_id).state == JobState.RUNNING, what="job running")

    assert c.local.kill_process("temporal", signal.SIGKILL, wait=5)
    everyone = ["controller", "worker-cpu-0", "worker-cpu-1", "worker-spare-0", "worker-victim-0"]
    holds_throughout(lambda: everyone == c.alive(), seconds=OUTAGE, what="every daemon running with the server away")
    # The outage outlasted the lease: the agent running the task gave the attempt up while the server was away.
    agents = ("cpu-0", "cpu-1", "spare-0")
    assert 1 == sum(logged(c.local.log_path(f"worker-{w}"), "task_lease_expired") for w in agents)
    spare = c.local.status().pids["worker-spare-0"]  # type: ignore[union-attr]
    told_at = time.monotonic()
    assert c.local.kill_process("spare-0", signal.SIGTERM, wait=15)
    stopped_in = time.monotonic() - told_at
    print(f"\nSIGTERM with Temporal away -> agent exited in {stopped_in:.1f} s")
    assert not pid_running(spare)  # within the 15 s: no SIGKILL needed

    c.local.restart_process("temporal")
    back_at = time.monotonic()
    wait_until(lambda: all(c.healthy(w) for w in ("cpu-0", "cpu-1", "victim-0")), timeout=60,
               what="workers healthy again")  # fmt: skip
    healthy_in = time.monotonic() - back_at
    print(f"dev server back -> the three agents healthy: {healthy_in:.1f} s")
    # Their sessions ended with the outage (timed out once the server was back); each agent learns it from
    # the server and registers again, not only after it has heard nothing for the silence limit.
    assert healthy_in < SESSION_SILENCE_SECONDS
    gate.touch()
    status = c.client.wait(job.job_id, timeout=120)
    assert JobState.SUCCEEDED == status.state
    assert ["controller", "temporal", "worker-cpu-0", "worker-cpu-1", "worker-victim-0"] == c.alive()
