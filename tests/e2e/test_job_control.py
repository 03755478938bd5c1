"""Job control on the session cluster: dependencies (`after=`), throttled arrays, idempotent names."""

from __future__ import annotations

import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from iris import IrisClient, JobFailedError, JobState, ResourceSpec
from tests.support import Cluster, armed_timers, wait_until

SMALL = ResourceSpec(cpu=0.25, memory="64m")


def wait_for_file(path: str, timeout: float = 300.0) -> float:
    """A task that runs until `path` exists; returns when it ended."""
    deadline = time.time() + timeout
    while not Path(path).exists():
        if time.time() > deadline:
            raise TimeoutError(path)
        time.sleep(0.1)
    return time.time()


def started_at() -> float:
    return time.time()


def fail_now() -> None:
    raise RuntimeError("this dependency fails on purpose")


def record_interval(directory: str, hold: float) -> None:
    """Write this task's start and end times to its own file (the intervals show how many ran at once)."""
    begin = time.time()
    time.sleep(hold)
    index = os.environ["IRIS_TASK_INDEX"]
    Path(directory, f"{index}-{os.environ['IRIS_ATTEMPT']}").write_text(f"{begin} {time.time()}")


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(b, 1) for b, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_a_dependent_job_waits_naming_its_dependency_and_runs_after_it(client: IrisClient, tmp_path: Path) -> None:
    """A job submitted `after` another waits PENDING with a reason naming it, starts no task, and runs once
    the other has succeeded; `iris job status`'s fields show the dependency."""
    gate = tmp_path / "go"
    first = client.submit(wait_for_file, str(gate), resources=SMALL, name="prep")
    second = client.submit(started_at, resources=SMALL, name="train", after=[first.job_id])
    status = second.status()
    assert (JobState.PENDING, (first.job_id,), "succeeded") == (status.state, status.after, status.after_rule)
    assert f"waiting for job {first.job_id} to succeed (after_rule=succeeded)" == status.pending_reason
    listed = {s.job_id: s for s in client.list_jobs(limit=50)}
    assert first.job_id in listed[second.job_id].pending_reason  # visibility (list_jobs) says it too
    # A job submitted after it runs: passes have run since, and would have placed `train` had it been queued.
    assert JobState.SUCCEEDED == client.submit(started_at, resources=SMALL, name="other").wait(timeout=120).state
    assert {"PENDING": 1} == second.status().task_state_counts
    gate.touch()
    ended = first.wait(timeout=120).finished_at
    second.wait(timeout=120)
    assert ended is not None and second.results()[0] >= ended
    assert "" == second.status().pending_reason


def test_a_dependency_that_fails_makes_the_job_unschedulable_naming_it(client: IrisClient) -> None:
    """`succeeded` refuses a failed dependency (UNSCHEDULABLE, the error names the job and its state, no task
    ran); `ended` runs after it anyway."""
    failing = client.submit(fail_now, resources=SMALL, name="bad-prep")
    strict = client.submit(started_at, resources=SMALL, after=[failing.job_id])
    lenient = client.submit(started_at, resources=SMALL, after=[failing.job_id], after_rule="ended")
    with pytest.raises(JobFailedError):
        strict.wait(timeout=120)
    status = strict.status()
    assert JobState.UNSCHEDULABLE == status.state
    assert f"dependency {failing.job_id} ended FAILED; after_rule=succeeded needs SUCCEEDED" == status.error
    assert [None] == [t.worker_id or None for t in status.tasks]
    assert {"UNSCHEDULABLE": 1} == status.task_state_counts  # the counts agree with the row

    def listed_as_ended() -> bool:  # visibility follows the job's last memo a moment later
        found = next((j for j in client.list_jobs(limit=500) if j.job_id == strict.job_id), None)
        return found is not None and {"UNSCHEDULABLE": 1} == found.task_state_counts

    wait_until(listed_as_ended, timeout=30, what="list_jobs counting the job's task UNSCHEDULABLE")
    assert JobState.SUCCEEDED == lenient.wait(timeout=120).state


def test_unknown_dependencies_and_bad_options_are_refused_at_submit(client: IrisClient) -> None:
    """An unknown job id in `after`, a bad rule, a cap on a gang: ValueError naming the field, nothing started."""
    before = len(client.list_jobs(limit=500))
    with pytest.raises(ValueError, match=r"^after\[0\]: no such job: no-such-job-123$"):
        client.submit(started_at, resources=SMALL, after=["no-such-job-123"])
    with pytest.raises(ValueError, match="after_rule must be one of succeeded, ended"):
        client.submit(started_at, resources=SMALL, after=[], after_rule="afterok")
    with pytest.raises(ValueError, match="max_concurrent cannot be used with coscheduling"):
        from iris import CoschedulingConfig
        client.submit(started_at, resources=ResourceSpec(cpu=1, replicas=4), max_concurrent=2,
                      coscheduling=CoschedulingConfig(group_by="tpu-name"))  # fmt: skip
    with pytest.raises(ValueError, match="if_exists='reuse' needs a name"):
        client.submit_command(["true"], if_exists="reuse")
    # A callable's own name does not stand in (another call of it, with other arguments, was handed back).
    with pytest.raises(ValueError, match="if_exists='reuse' needs a name"):
        client.submit(started_at, resources=SMALL, if_exists="reuse")
    with pytest.raises(ValueError, match="after_rule: 'ended' given without after"):  # it was ignored
        client.submit(started_at, resources=SMALL, after_rule="ended")
    assert before == len(client.list_jobs(limit=500))
    with pytest.raises(ValueError, match=r"^job_id must be a job's id \(a non-empty string\), got None$"):
        client.job(None)  # type: ignore[arg-type]


def test_a_job_killed_while_it_waits_ends_killed(client: IrisClient, tmp_path: Path) -> None:
    """Killing a waiting job (or cancelling its workflow in the Temporal UI) ends it KILLED at once; its
    dependency runs on."""
    first = client.submit(wait_for_file, str(tmp_path / "never"), resources=SMALL)
    second = client.submit(started_at, resources=SMALL, after=[first.job_id])
    wait_until(lambda: second.status().pending_reason.startswith("waiting for job"), what="second waits")
    client.terminate(second.job_id)
    assert JobState.KILLED == second.wait(timeout=60, raise_on_failure=False).state
    third = client.submit(started_at, resources=SMALL, after=[first.job_id])
    wait_until(lambda: third.status().pending_reason.startswith("waiting for job"), what="third waits")
    client._run(client._async.temporal.get_workflow_handle(third.job_id).cancel())  # the Temporal UI's cancel
    assert JobState.KILLED == third.wait(timeout=60, raise_on_failure=False).state
    assert first.status().state in (JobState.PENDING, JobState.RUNNING)
    client.terminate(first.job_id)


def test_a_throttled_array_never_has_more_than_its_cap_placed(client: IrisClient, tmp_path: Path) -> None:
    """12 tasks capped at 2 on a fleet with room for many more: never more than 2 run at once (their own
    clocks say so), the cap is used, and the waiting tasks' reason names it."""
    job = client.submit(record_interval, str(tmp_path), 0.5, resources=ResourceSpec(cpu=0.1, memory="64m",
                        replicas=12), max_concurrent=2, name="sweep")  # fmt: skip
    wait_until(lambda: "max_concurrent=2" in job.status().pending_reason, what="the cap named in the reason")
    assert 2 == job.status().max_concurrent
    job.wait(timeout=300)
    intervals = [tuple(map(float, p.read_text().split())) for p in tmp_path.iterdir()]
    assert 12 == len(intervals)
    assert 2 == most_at_once(intervals)  # type: ignore[arg-type]


def test_racing_reuse_submits_get_one_job(cluster: Cluster, client: IrisClient, tmp_path: Path) -> None:
    """Four clients (each its own connection) submitting one name with `reuse` at once get the same job, which
    ran once; `fail` is refused while it runs; once it succeeded `reuse` still returns it and `new` starts
    another."""
    name = f"prep-{uuid.uuid4().hex[:6]}"
    gate = tmp_path / "go"
    clients = [IrisClient.connect(cluster.info.address, store=cluster.info.store_url) for _ in range(4)]
    start = threading.Barrier(4)

    def submit(each: IrisClient) -> str:
        start.wait(timeout=30)
        return each.submit(wait_for_file, str(gate), resources=SMALL, name=name, if_exists="reuse").job_id

    try:
        with ThreadPoolExecutor(4) as pool:
            ids = set(pool.map(submit, clients))
    finally:
        for each in clients:
            each.close()
    assert 1 == len(ids)
    (job_id,) = ids
    wait_until(lambda: client.list_jobs(limit=500, name=name), what="the job listed")
    assert [job_id] == [j.job_id for j in client.list_jobs(limit=500, name=name)]  # one job started, not four
    with pytest.raises(ValueError, match=f"if_exists='fail': job {job_id} named '{name}' is"):
        client.submit(wait_for_file, str(gate), resources=SMALL, name=name, if_exists="fail")
    gate.touch()
    client.wait(job_id, timeout=120)
    assert [name] == [j.name for j in client.list_jobs(limit=500, name=name)]
    assert job_id == client.submit(started_at, resources=SMALL, name=name, if_exists="reuse").job_id
    other = client.submit(started_at, resources=SMALL, name=name, if_exists="new").job_id
    assert job_id != other
    client.wait(other, timeout=120)


def test_reuse_after_a_failure_starts_a_new_job(client: IrisClient) -> None:
    """A name whose only job failed is submitted again by `reuse` (under a new id), and once more returns it."""
    name = f"flaky-{uuid.uuid4().hex[:6]}"
    bad = client.submit(fail_now, resources=SMALL, name=name, if_exists="reuse")
    assert JobState.FAILED == bad.wait(timeout=120, raise_on_failure=False).state
    again = client.submit(started_at, resources=SMALL, name=name, if_exists="reuse")
    assert bad.job_id != again.job_id
    assert again.job_id == client.submit(started_at, resources=SMALL, name=name, if_exists="reuse").job_id
    again.wait(timeout=120)


def test_a_schedule_submits_named_jobs_and_can_be_paused_triggered_and_deleted(client: IrisClient) -> None:
    """A Temporal Schedule firing every second submits jobs named `<schedule>-<fire time>` as its creator;
    its status says its cron, time zone and next 3 firings; paused it fires no more, trigger submits one
    now, and deleted it is gone while its jobs stay."""
    name = f"nightly-{uuid.uuid4().hex[:6]}"
    sched = client.create_schedule(name, started_at, cron="* * * * * * *", timezone="Europe/Paris",
                                   overlap="skip", resources=SMALL, max_retries_failure=1)  # fmt: skip
    try:
        status = sched.status()
        assert (name, "* * * * * * *", "Europe/Paris", False) == (status.name, status.cron, status.timezone,
                                                                      status.paused)  # fmt: skip
        assert 3 == len(status.next_runs) and status.next_runs[0] < status.next_runs[1] < status.next_runs[2]
        assert name in [s.name for s in client.list_schedules()]
        wait_until(lambda: len(sched.jobs()) >= 2, timeout=60, what="two firings")
        jobs = sched.jobs()
        first = jobs[0].wait(timeout=120)
        assert first.name == jobs[0].job_id and first.job_id.startswith(f"{name}-20")
        assert client.job_status(jobs[0].job_id).user == client.job_status(jobs[1].job_id).user
        sched.pause()
        assert [True] == [s.paused for s in client.list_schedules() if s.name == name]  # listed paused at once
        paused = sched.status()  # describe: every firing before the pause is in it, none after
        assert paused.paused and () == paused.next_runs  # it fires at none of them while paused
        # Every firing before the pause is listed (visibility may trail its start by a moment) before counting.
        wait_until(lambda: set(paused.recent_jobs) <= {j.job_id for j in sched.jobs()}, timeout=30,
                   what="the firings before the pause listed")  # fmt: skip
        paused_count = len(sched.jobs())
        # Two of its firing times pass while it is paused (its own next times, else two periods of 1 s).
        due = paused.next_runs[1] if len(paused.next_runs) > 1 else datetime.now(UTC) + timedelta(seconds=2)
        wait_until(lambda: datetime.now(UTC) > due + timedelta(seconds=1), timeout=30, what="two firing times")
        assert paused.recent_jobs[-1:] == sched.status().recent_jobs[-1:]
        assert paused_count == len(sched.jobs())
        sched.trigger()
        wait_until(lambda: len(sched.jobs()) == paused_count + 1, timeout=30, what="the triggered job")
        recent = sched.status().recent_jobs
        assert recent and recent[-1] == sched.jobs()[-1].job_id
        sched.trigger()
        sched.trigger()  # in the same second as the last, it would name the same job: each trigger is one job
        wait_until(lambda: len(sched.jobs()) == paused_count + 3, timeout=30, what="two more triggered jobs")
    finally:
        sched.delete()
    with pytest.raises(KeyError, match=f"no such schedule: {name}"):
        sched.status()
    again = client.create_schedule(name, started_at, cron="0 3 * * *", resources=SMALL)
    try:
        assert [] == again.jobs()  # the deleted schedule's jobs are not the new one's
    finally:
        again.delete()
    assert name not in [s.name for s in client.list_schedules()]
    with pytest.raises(ValueError, match="overlap must be one of"):
        client.create_schedule(f"{name}-x", started_at, cron="* * * * *", overlap="sometimes")
    with pytest.raises(ValueError, match="timezone: unknown time zone 'Mars/Olympus'"):
        client.create_schedule(f"{name}-x", started_at, cron="* * * * *", timezone="Mars/Olympus")
    with pytest.raises(ValueError, match=r"^cron: "):
        client.create_schedule(f"{name}-x", started_at, cron="every full moon")
    with pytest.raises(ValueError, match=r"^cron: '0 3 \* \* \* 2020' never fires"):
        client.create_schedule(f"{name}-x", started_at, cron="0 3 * * * 2020")
    assert f"{name}-x" not in [s.name for s in client.list_schedules()]


def test_an_array_at_its_cap_arms_no_timer_in_the_scheduler(client: IrisClient, tmp_path: Path) -> None:
    """While a throttled array sits at its cap (its held-back tasks can only be placed once one ends), the
    scheduler arms no 1 s pass timer (~5 events a second in its history): read from its history."""
    from activities.contracts import SCHEDULER_WORKFLOW_ID
    from workflows.scheduler.scheduler_workflow import PASS_INTERVAL

    gate = tmp_path / "go"
    job = client.submit(wait_for_file, str(gate), resources=ResourceSpec(cpu=0.1, memory="64m", replicas=6),
                        max_concurrent=2)  # fmt: skip
    wait_until(lambda: job.status().task_state_counts.get("RUNNING") == 2, what="two tasks running")
    scheduler = client._async.temporal.get_workflow_handle(SCHEDULER_WORKFLOW_ID)

    def settled_without_a_pass_timer() -> bool:
        armed = armed_timers(client._run(scheduler.fetch_history()))
        return armed is not None and PASS_INTERVAL.total_seconds() not in armed

    # With the pass timer armed, the scheduler would never be found settled without it: it is re-armed
    # with every pass. Its other timers (the user table's publication) fire once and are not re-armed.
    wait_until(settled_without_a_pass_timer, timeout=30, interval=0.2, what="the scheduler idle, no pass timer")
    assert 2 == job.status().task_state_counts.get("RUNNING")
    gate.touch()
    job.wait(timeout=120)


def test_a_cancel_other_schedule_kills_its_last_job_saying_why(client: IrisClient, tmp_path: Path) -> None:
    """overlap="cancel_other": each firing cancels the job still running from the last; that job ends KILLED
    with an error that says a schedule's overlap policy cancelled it, not a bare "cancelled"."""
    name = f"co-{uuid.uuid4().hex[:6]}"
    sched = client.create_schedule(name, wait_for_file, str(tmp_path / "never"), cron="* * * * * * *",
                                   overlap="cancel_other", resources=SMALL)  # fmt: skip
    try:
        wait_until(lambda: len(sched.jobs()) >= 2, timeout=60, what="two firings")
        first = sched.jobs()[0].wait(timeout=60, raise_on_failure=False)
    finally:
        jobs = sched.jobs()
        sched.delete()
        for job in jobs:
            client.terminate(job.job_id)
    assert JobState.KILLED == first.state
    assert "cancelled by schedule overlap policy" == first.error


def test_a_throttled_arrays_own_cap_does_not_count_toward_its_scheduling_timeout(client: IrisClient) -> None:
    """6 tasks of 1 s, one at a time, with a 3 s scheduling timeout on a fleet with room (a place takes a
    fraction of it): the last tasks wait for the ones before them far longer than 3 s in all (from the
    submission, and from the first task's end), but only for their cap, never for the fleet."""
    job = client.submit_command(["sleep", "1"], resources=ResourceSpec(cpu=0.25, memory="64m", replicas=6),
                                max_concurrent=1, scheduling_timeout=3)  # fmt: skip
    status = job.wait(timeout=180, raise_on_failure=False)
    assert JobState.SUCCEEDED == status.state, status.error
