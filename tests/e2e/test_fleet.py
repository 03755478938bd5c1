"""The autoscaler end to end on the local platform: real dev server, controller and slice worker processes.

One cluster for the module, with no static workers and three scale groups: `tpu`
(4-host slices, max 1), `broken` (its agents exit at once: bootstrap always fails)
and `quota` (asks for more hosts than the machine's local quota allows).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from temporalio.client import Client

from iris import Constraint, CoschedulingConfig, IrisClient, Job, JobState, ResourceSpec, SliceState
from iris.client.views.fleet_view import SLICE_STATE
from iris.config.cluster_file import parse_config
from iris.local.cluster import LocalCluster
from tests.support import (
    Cluster,
    autoscaler_mark,
    fetch_and_replay,
    plans_since,
    short_dead_controller_waits,
    wait_until,
)
from workflows.fleet.slice_workflow import ScaleDown

# An idle slice goes this long after it is seen idle; a slice with a gang waiting for it is not idle (the
# autoscaler places pending work on existing slices first), so a short one only shortens the tests' waits.
SCALE_DOWN_DELAY = 1.0
FLEET = {
    # The default 5 s scan only makes the tests wait; so does a slice step's 10 s heartbeat timeout in the kill
    # test (the step the killed controller ran is run again once its beats have stopped that long).
    "autoscaler": {"scan_interval": "1s", "slice_heartbeat_timeout": "5s"},
    "scale_groups": [
        {
            "name": "tpu", "platform": "local", "hosts_per_slice": 4, "max_slices": 1,
            "resources": {"cpu": 0.5, "memory": "256m"}, "attributes": {"tpu-topology": "v5e-16"},
            "scale_down_delay": f"{SCALE_DOWN_DELAY:g}s",
        },
        {
            "name": "broken", "platform": "local", "hosts_per_slice": 2, "max_slices": 1,
            "resources": {"cpu": 0.5, "memory": "256m"}, "attributes": {"pool": "broken"},
            # the process says it; its command line does not contain the words
            "local": {"worker_command": [sys.executable, "-c", "import sys; sys.exit('agent cannot ' + 'start here')"]},
        },
        {
            "name": "quota", "platform": "local", "hosts_per_slice": 2, "max_slices": 2,
            "resources": {"cpu": 0.5, "memory": "256m"}, "attributes": {"pool": "quota"},
            "local": {"max_hosts": 1},
        },
    ]
}  # fmt: skip
# The kill test's chains each wait out the dead controller's sticky queue once per workflow (the scheduler, then the
# gang's task workflows; the slice after its step's heartbeat timeout): 3 s each with tests.support's setting. A live
# controller takes its sticky tasks in milliseconds, and one that misses this only replays from the shared queue.
STICKY_TIMEOUT = 1.5
GANG = {
    "resources": ResourceSpec(cpu=0.5, memory="128m", replicas=4),
    "constraints": [Constraint("tpu-topology", "EQ", "v5e-16")],
    "coscheduling": CoschedulingConfig("tpu-name"),
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = tmp_path_factory.mktemp("iris-fleet")
    local = LocalCluster(home)
    with pytest.MonkeyPatch.context() as env:  # in this module only: its kill test waits for the dead controller
        dynamic_config = short_dead_controller_waits(env)
        env.setenv("IRIS_STICKY_TIMEOUT_SECONDS", f"{STICKY_TIMEOUT:g}")  # every controller of the module's
        info = local.up(parse_config(FLEET, "fleet test config"), dynamic_config=dynamic_config)
        try:
            yield Cluster(local, info)
        finally:
            local.down()
        for procs in slice_hosts(home).values():  # whatever a failed test left behind
            for p in procs:
                p.kill()


@pytest.fixture(scope="module")
def fleet_client(fleet: Cluster) -> IrisClient:
    return IrisClient.connect(fleet.info.address, store=fleet.info.store_url)


@pytest.fixture
def beside() -> Iterator[ThreadPoolExecutor]:
    """Threads for a test's steps that depend on nothing else it does (a CLI call, ~1 s of a Python start each),
    run while it waits for the cluster; all finished before the test ends."""
    with ThreadPoolExecutor(2) as pool:
        yield pool


def slice_hosts(home: Path) -> dict[str, list[psutil.Process]]:
    """Worker processes of this cluster's slices by slice id, read from the process table (not from Iris)."""
    hosts: list[tuple[str, psutil.Process]] = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
            ours = env.get("IRIS_HOME") == str(home) and "IRIS_SLICE_ID" in env and p.pid == os.getpgid(p.pid)
            ours = ours and "serve" in p.cmdline()  # the agent, not its lease watchdog (a session of its own)
            if ours and p.status() != psutil.STATUS_ZOMBIE:
                hosts.append((env["IRIS_SLICE_ID"], p))
        except (psutil.Error, OSError):
            continue
    # A child an agent has just forked into a session of its own (a lease watchdog before its exec) still shows
    # the agent's command line and environment: a host's parent is never another host.
    pids = {p.pid for _, p in hosts}
    found: dict[str, list[psutil.Process]] = {}
    for slice_id, p in hosts:
        with contextlib.suppress(psutil.Error):
            if p.ppid() not in pids:
                found.setdefault(slice_id, []).append(p)
    return found


def gang_job(client: IrisClient, work: Path, seconds: float = 0.0, until: Path | None = None) -> Job:
    """A coscheduled 4-task job that records where and when each task ran.

    Each task runs `seconds`, or with `until` as long as that file does not exist: a test that needs the
    gang running while it checks something releases it once checked, instead of guessing a length.
    """
    script = (
        "import json, os, sys, time; start = time.time(); time.sleep(float(sys.argv[2]))\n"
        "while len(sys.argv) > 3 and not os.path.exists(sys.argv[3]): time.sleep(0.05)\n"
        "open(os.path.join(sys.argv[1], os.environ['IRIS_JOB_ID'] + '-' + os.environ['IRIS_TASK_INDEX']), 'w')"
        ".write(json.dumps([os.environ['IRIS_WORKER_ID'], start, time.time()]))"
    )
    argv = [sys.executable, "-c", script, str(work), str(seconds), *([str(until)] if until else [])]
    return client.submit_command(argv, **GANG)  # type: ignore[arg-type]


def ran(work: Path, job: Job) -> list[tuple[str, float, float]]:
    return [tuple(json.loads((work / f"{job.job_id}-{i}").read_text())) for i in range(4)]  # type: ignore[misc]


def cli(fleet: Cluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "iris", *args], env=fleet.env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def test_a_gang_job_on_an_empty_group_gets_a_slice_and_the_idle_slice_goes(
    fleet: Cluster, fleet_client: IrisClient, tmp_path: Path
) -> None:
    """Empty group -> the autoscaler creates a 4-host slice, the gang runs there, the idle slice is deleted."""
    start = time.monotonic()
    release = tmp_path / "release"  # the gang runs until its slice and workers have been looked at, however long
    job = gang_job(fleet_client, tmp_path, until=release)
    try:
        wait_until(lambda: job.status().state == JobState.RUNNING, timeout=120, what="job running")
        running_after = time.monotonic() - start
        (slice_id,) = slice_hosts(fleet.local.home)
        assert slice_id.startswith("tpu-")
        assert 4 == len(slice_hosts(fleet.local.home)[slice_id])
        attributes = {w.worker_id: w.attributes for w in fleet_client.list_workers()}
        for i in range(4):
            expected = {"iris-slice-id": slice_id, "iris-scale-group": "tpu", "tpu-name": slice_id, "tpu-worker-id": i}
            assert expected.items() <= attributes[f"{slice_id}-{i}"].items()
    finally:
        release.touch()
    assert JobState.SUCCEEDED == job.wait(timeout=120).state
    workers = {w for w, _, _ in ran(tmp_path, job)}
    assert {f"{slice_id}-{i}" for i in range(4)} == workers

    done = time.monotonic()
    wait_until(lambda: slice_id not in slice_hosts(fleet.local.home), timeout=90, what="slice processes gone")
    gone_after = time.monotonic() - done
    ended = {s.slice_id: s for s in fleet_client.list_slices(include_ended=True)}
    wait_until(lambda: not {w.worker_id for w in fleet_client.list_workers()} & workers, timeout=30,
               what="the slice's workers removed from the scheduler")  # fmt: skip
    wait_until(lambda: SliceState.TERMINATED == {s.slice_id: s for s in fleet_client.list_slices(True)}[slice_id].state,
               timeout=30, what="slice listed TERMINATED")  # fmt: skip
    assert "tpu" == ended[slice_id].scale_group
    assert tuple(sorted(workers)) == ended[slice_id].worker_ids
    assert slice_id not in {s.slice_id for s in fleet_client.list_slices()}
    print(f"\nfleet: empty group -> job RUNNING {running_after:.1f}s; idle slice -> processes gone {gone_after:.1f}s "
          f"(scale_down_delay {SCALE_DOWN_DELAY:g}s)")  # fmt: skip


def test_two_gangs_with_max_slices_1_run_one_after_the_other(
    fleet: Cluster, fleet_client: IrisClient, tmp_path: Path
) -> None:
    """Two 4-host gangs at once on a group of at most one slice: never two slices, the second runs after the first."""
    # Each runs 1 s: the second gang is pending, asking for a slice the group may not add, from its submission (the
    # slice's creation, ~2 s) to the first gang's end; the autoscaler plans every 1 s (scan_interval) meanwhile.
    jobs = [gang_job(fleet_client, tmp_path, seconds=1.0) for _ in range(2)]
    most = 0
    deadline = time.monotonic() + 180
    while not all(j.status().done for j in jobs) and time.monotonic() < deadline:
        hosts = slice_hosts(fleet.local.home)
        most = max(most, len(hosts))
        time.sleep(0.3)
    assert [JobState.SUCCEEDED, JobState.SUCCEEDED] == [j.wait(timeout=10).state for j in jobs]
    assert 1 == most
    first, second = sorted((ran(tmp_path, j) for j in jobs), key=lambda r: min(s for _, s, _ in r))
    assert max(end for _, _, end in first) <= min(start for _, start, _ in second)


def test_a_group_whose_bootstrap_always_fails_backs_off_within_max_slices_and_says_why(
    fleet: Cluster, fleet_client: IrisClient
) -> None:
    """Agents that cannot start: slices fail, the group backs off, never has more than max_slices, status says why."""
    job = fleet_client.submit_command(["true"], resources=ResourceSpec(cpu=0.5, memory="128m"),
                                      constraints=[Constraint("pool", "EQ", "broken")])  # fmt: skip
    try:
        most = 0

        def backing_off() -> str | None:
            nonlocal most
            broken = [s for s in slice_hosts(fleet.local.home) if s.startswith("broken-")]
            most = max(most, len(broken))
            status = cli(fleet, "cluster", "status")
            return status.stdout if "backing off" in status.stdout else None

        text = wait_until(backing_off, timeout=120, interval=0.5, what="the broken group backing off")
        assert "slices failed in a row" in text and "agent cannot start here" in text, text
        failed = [s for s in fleet_client.list_slices(include_ended=True) if s.scale_group == "broken"]
        assert failed and all(SliceState.FAILED == s.state for s in failed)
        assert all("agent cannot start here" in s.error for s in failed), [s.error for s in failed]
        assert most <= 1
        assert JobState.PENDING == job.status().state
    finally:
        job.terminate()
    wait_until(lambda: not [s for s in slice_hosts(fleet.local.home) if s.startswith("broken-")], timeout=60,
               what="no broken slice left running")  # fmt: skip


def test_a_quota_refusal_surfaces_as_quota_exhausted(fleet: Cluster, fleet_client: IrisClient) -> None:
    """A platform's quota refusal fails the slice as QuotaExhausted and backs the group off at once."""
    job = fleet_client.submit_command(["true"], resources=ResourceSpec(cpu=0.5, memory="128m"),
                                      constraints=[Constraint("pool", "EQ", "quota")])  # fmt: skip

    def status_says_quota() -> str | None:
        out = cli(fleet, "cluster", "status").stdout
        return out if "quota exhausted" in out else None

    try:
        text = wait_until(status_says_quota, timeout=90, interval=0.5, what="quota reported")
        assert "exceed max_hosts 1" in text, text
        failed = [s for s in fleet_client.list_slices(include_ended=True) if s.scale_group == "quota"]
        assert failed and all(SliceState.FAILED == s.state and "max_hosts" in s.error for s in failed)
        assert not [s for s in slice_hosts(fleet.local.home) if s.startswith("quota-")]
    finally:
        job.terminate()


async def _ask_idle_scale_down(address: str, slice_id: str) -> str:
    """Send the autoscaler's idle-only scale-down to a slice; the answer of its check for work."""
    handle = (await Client.connect(address)).get_workflow_handle(slice_id)
    await handle.signal("scale_down", ScaleDown("idle (sent by the test)", 600.0, only_if_idle=True))
    for _ in range(300):
        scheduled: set[int] = set()
        async for event in handle.fetch_history_events():
            if event.activity_task_scheduled_event_attributes.activity_type.name == "slice_still_busy":
                scheduled.add(event.event_id)
            done = event.activity_task_completed_event_attributes
            if event.HasField("activity_task_completed_event_attributes") and done.scheduled_event_id in scheduled:
                return str(json.loads(done.result.payloads[0].data))
        await asyncio.sleep(0.1)
    raise AssertionError(f"{slice_id} never checked for work")


def test_a_slice_picked_for_idle_scale_down_as_a_job_lands_on_it_stays(
    fleet: Cluster, fleet_client: IrisClient, tmp_path: Path
) -> None:
    """The autoscaler decides on a snapshot; a slice that got work since stays READY and uncordoned, its job runs."""
    release = tmp_path / "release"  # the gang runs until the slice has checked for work and stayed, however long
    job = gang_job(fleet_client, tmp_path, until=release)
    try:
        wait_until(lambda: job.status().state == JobState.RUNNING, timeout=120, what="gang running")
        (slice_id,) = {t.worker_id.rsplit("-", 1)[0] for t in job.status().tasks if t.worker_id}
        # A fresh slice runs tasks as soon as its hosts register, a moment before it is READY;
        # the autoscaler only scales down READY slices.
        wait_until(lambda: {s.slice_id: s.state for s in fleet_client.list_slices()}.get(slice_id) == SliceState.READY,
                   timeout=60, what="slice READY")  # fmt: skip
        answer = asyncio.run(_ask_idle_scale_down(fleet.info.address, slice_id))
        assert "4 tasks placed on it" == answer
        mine = {f"{slice_id}-{i}" for i in range(4)}
        assert not [w for w in fleet_client.list_workers() if w.worker_id in mine and w.cordoned]
        assert SliceState.READY == {s.slice_id: s.state for s in fleet_client.list_slices()}[slice_id]
        assert not job.status().done  # the check ran while the gang did
    finally:
        release.touch()
    assert JobState.SUCCEEDED == job.wait(timeout=60).state
    assert mine == {w for w, _, _ in ran(tmp_path, job)}
    # Idle for real now: the autoscaler's own scale-down removes it.
    wait_until(lambda: slice_id not in slice_hosts(fleet.local.home), timeout=90, what="idle slice gone")


def test_drain_waits_for_running_tasks_and_terminate_deletes_the_slice(
    fleet: Cluster, fleet_client: IrisClient, tmp_path: Path, beside: ThreadPoolExecutor
) -> None:
    """`iris worker drain` returns once the worker's task finished; `iris slice terminate` stops the slice."""
    missing = beside.submit(cli, fleet, "slice", "terminate", "no-such-slice")  # needs nothing of the rest
    release = tmp_path / "release"  # the gang runs until the drain is seen waiting for it, however long that takes
    job = gang_job(fleet_client, tmp_path, until=release)
    try:
        wait_until(lambda: job.status().state == JobState.RUNNING, timeout=120, what="gang running")
        # The job is RUNNING once one task runs; the others' places show up in its status moments later.
        worker = wait_until(lambda: next(t.worker_id for t in job.status().tasks if t.task_index == 0), timeout=30,
                            what="task 0's worker in the job's status")  # fmt: skip
        slice_id = worker.rsplit("-", 1)[0]
        stderr = tmp_path / "drain.stderr"
        with stderr.open("w") as err:
            drain = subprocess.Popen([sys.executable, "-m", "iris", "worker", "drain", worker], env=fleet.env,
                                     stdout=subprocess.DEVNULL, stderr=err, text=True)  # fmt: skip
        try:
            wait_until(lambda: "waiting for 1 running tasks" in stderr.read_text(), timeout=120,
                       what="the drain waiting for the task")  # fmt: skip
            assert drain.poll() is None, stderr.read_text()  # still waiting, with the task still running
        except BaseException:
            drain.kill()
            raise
    finally:
        release.touch()
    listed = beside.submit(cli, fleet, "slice", "list", "--all")  # ended slices too: it lists this one however late
    drain.wait(timeout=120)
    drained_at = time.time()
    assert 0 == drain.returncode, stderr.read_text()
    assert worker in {w.worker_id for w in fleet_client.list_workers() if w.cordoned}
    assert JobState.SUCCEEDED == job.wait(timeout=60).state
    assert ran(tmp_path, job)[0][2] <= drained_at  # the task ran to its end: drained, not killed
    assert slice_id in listed.result().stdout, listed.result().stdout
    terminated = cli(fleet, "slice", "terminate", slice_id)  # the autoscaler may have begun scaling it down
    assert 0 == terminated.returncode, terminated.stderr
    assert f"terminating {slice_id}" in terminated.stderr or "had already ended" in terminated.stderr
    wait_until(lambda: slice_id not in slice_hosts(fleet.local.home), timeout=60, what="terminated slice gone")
    assert 1 == missing.result().returncode and "no such slice: no-such-slice" in missing.result().stderr


def test_controller_sigkilled_mid_scale_up_neither_leaks_nor_duplicates_the_slice(
    fleet: Cluster, fleet_client: IrisClient, tmp_path: Path
) -> None:
    """SIGKILL the controller after the slice's hosts started, before READY: after a restart one slice, 4 hosts."""
    before = {s.slice_id for s in fleet_client.list_slices(include_ended=True)}
    # It runs until it is seen running after the restart with the slice's hosts counted: the first status after
    # the restart waits for the controller to answer, and a job of no length was done (its slice going) by then,
    # with no host ever counted.
    release = tmp_path / "release"
    job = gang_job(fleet_client, tmp_path, until=release)
    # Hosts of an earlier test's slice (of the quota group, say) may still be going away.
    hosts = wait_until(lambda: {k: v for k, v in slice_hosts(fleet.local.home).items()
                                if k.startswith("tpu-") and k not in before},
                       timeout=120, interval=0.05, what="the new slice's first host process")  # fmt: skip
    (slice_id,) = hosts
    fleet.local.kill_process("controller", signal.SIGKILL, wait=10)
    killed = time.monotonic()
    state_at_kill = {s.slice_id: s.state for s in fleet_client.list_slices()}.get(slice_id)
    # Started again at once: the slice's step that the dead controller ran is run again only once its heartbeat
    # timeout (5 s here) has passed, so the new controller takes over mid scale-up whenever it comes back.
    fleet.local.restart_process("controller")
    most = 0
    try:
        while True:  # count first: the status call may take a while
            now = slice_hosts(fleet.local.home)  # one look at the process table for both counts
            most = max(most, len(now.get(slice_id, [])), len(now))
            status = job.status()
            if status.done:
                break
            if status.state == JobState.RUNNING and most >= 4:
                release.touch()  # the gang runs on the slice and its hosts were counted: let it end
            time.sleep(0.3)
    finally:
        release.touch()
    done_after = time.monotonic() - killed
    assert JobState.SUCCEEDED == job.wait(timeout=10).state
    assert state_at_kill in (SliceState.CREATING, SliceState.BOOTSTRAPPING)
    assert 4 == most
    new = {s.slice_id for s in fleet_client.list_slices(include_ended=True)} - before
    assert {slice_id} == new
    assert {slice_id} == {w.rsplit("-", 1)[0] for w, _, _ in ran(tmp_path, job)}
    wait_until(lambda: slice_id not in slice_hosts(fleet.local.home), timeout=90, what="slice gone after the job")
    print(f"\nfleet: controller SIGKILLed mid scale-up -> job done {done_after:.1f}s, slice gone "
          f"{time.monotonic() - killed:.1f}s after the kill")  # fmt: skip


def test_a_slice_whose_workflow_was_terminated_by_hand_is_cleaned_up_when_the_controller_starts(
    fleet: Cluster, fleet_client: IrisClient, tmp_path: Path
) -> None:
    """Orphans: a slice left running by a terminated SliceWorkflow is deleted at the controller's next start."""
    job = gang_job(fleet_client, tmp_path, seconds=60.0)  # keeps the slice busy, so it is not scaled down
    wait_until(lambda: job.status().state == JobState.RUNNING, timeout=120, what="gang running")
    (slice_id,) = {t.worker_id.rsplit("-", 1)[0] for t in job.status().tasks if t.worker_id}

    async def terminate_workflow() -> None:
        temporal = await Client.connect(fleet.info.address)
        await temporal.get_workflow_handle(slice_id).terminate("test: leave the slice behind")

    asyncio.run(terminate_workflow())
    mark = autoscaler_mark(fleet.info.address)
    job.terminate()
    # Each plan is a chance to delete the slice.
    wait_until(lambda: job.status().done and plans_since(fleet.info.address, mark) >= 2, timeout=60,
               what="the job ended and two autoscaler plans after it")  # fmt: skip
    assert 4 == len(slice_hosts(fleet.local.home).get(slice_id, []))  # nothing deleted it: an orphan
    ended = {s.slice_id: s for s in fleet_client.list_slices(include_ended=True)}[slice_id]
    assert SliceState.FAILED == ended.state and "terminated" in ended.error
    fleet.local.kill_process("controller", signal.SIGTERM, wait=30)
    fleet.local.restart_process("controller")
    wait_until(lambda: slice_id not in slice_hosts(fleet.local.home), timeout=90, what="orphan slice deleted")


async def _replay_fleet_histories(address: str) -> dict[str, int]:
    client = await Client.connect(address)
    record = os.environ.get("IRIS_RECORD_HISTORIES")
    counts: dict[str, int] = {}
    events: list[int] = []
    runs = [wf async for wf in client.list_workflows("WorkflowType IN ('SliceWorkflow', 'AutoscalerWorkflow')")]
    for wf, (history, failure) in zip(runs, await fetch_and_replay(client, runs), strict=True):
        assert not failure, f"{wf.workflow_type} {wf.id}: {failure}"
        kind = f"{wf.workflow_type}-{wf.status.name.lower() if wf.status else 'unknown'}"
        if wf.workflow_type == "SliceWorkflow":  # one kind per way a slice ends
            kind += f"-{(wf.typed_search_attributes.get(SLICE_STATE) or 'unknown').lower()}"
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "SliceWorkflow-completed-terminated":
            events.append(len(history.events))
        if record and counts[kind] <= 2:
            fixture = {"workflow_id": wf.id, "history": json.loads(history.to_json())}
            (Path(record) / f"{kind}-{counts[kind]}.json").write_text(json.dumps(fixture))
    if events:
        print(f"\nfleet: history events per slice lifetime (created, ran, scaled down): {sorted(events)}")
    return counts


def test_every_slice_and_autoscaler_history_replays(fleet: Cluster) -> None:
    """Every slice and autoscaler history of this module replays against today's workflow code."""
    counts = asyncio.run(_replay_fleet_histories(fleet.info.address))
    assert counts.get("SliceWorkflow-completed-terminated", 0) >= 2, counts
    assert counts.get("SliceWorkflow-completed-failed", 0) >= 2, counts
    assert counts.get("AutoscalerWorkflow-running", 0) >= 1, counts
