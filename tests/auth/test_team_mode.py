"""Team mode on a real local cluster: who may do what, through the client, the CLI and the dashboard's HTTP.

One small cluster (`auth: tokens`, two workers) for the module; users `ana` and `bob`, the first admin
(its token from $IRIS_HOME/admin.token) and a worker credential.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import functools
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from temporalio.client import Client

from activities.proto import cluster_pb2 as pb
from iris import AuthenticationError, Constraint, IrisClient, Job, JobState, PermissionDeniedError, ResourceSpec
from iris.config.cluster_file import parse_config
from iris.local.cluster import LocalCluster
from tests.support import command_imports, wait_until

TEAM_FLEET = {
    # A task token is refused within 0.5 s of its job's end (default 5 s), which the token test waits for.
    "auth": {"mode": "tokens", "task_token_recheck": "0.5s"},
    "local": {"worker_groups": [{"name": "cpu", "count": 2, "resources": {"cpu": 2, "memory": "2g"}}]},
    "sharing": {"teams": [{"name": "vision", "members": ["ana"], "quota": {"cpu": 2, "memory": "1g"}}]},
}
SMALL = ResourceSpec(cpu=0.1, memory="64m")
# A task that imports Iris (its client): ~0.7 s of CPU, which a tenth of a core (its cgroup's limit) stretched to ~5 s.
CLIENT_TASK = ResourceSpec(cpu=1, memory="256m")
T = TypeVar("T")


def concurrently(*calls: Callable[[], T]) -> list[T]:
    """Each call's answer, in order, the calls made at once: for checks that do not depend on each other.

    Most checks here run an `iris` command, ~0.7 s of which is Python starting and importing; one after
    another they were most of this module's time."""
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        return [future.result() for future in [pool.submit(call) for call in calls]]


@dataclass
class Team:
    local: LocalCluster
    url: str
    tokens: dict[str, str]
    clients: dict[str, IrisClient]

    def env(self, who: str | None) -> dict[str, str]:
        """The CLI's environment for `who` (no Temporal address: users reach only the Iris API)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("IRIS_TEMPORAL_", "IRIS_TOKEN", "IRIS_USER"))}
        env["IRIS_HOME"] = str(self.local.home)
        if who is not None:
            env["IRIS_TOKEN"] = self.tokens[who]
        return env

    def cli(self, who: str | None, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "iris", *args], env=self.env(who), capture_output=True,
                              text=True, timeout=120)  # fmt: skip

    def http(self, method: str, path: str, who: str | None = None, accept: str = "text/html") -> tuple[int, str]:
        headers = {"Accept": accept}
        if who is not None:
            headers["Authorization"] = f"Bearer {self.tokens[who]}"
        request = urllib.request.Request(self.url + path, method=method, headers=headers,
                                         data=b"" if method == "POST" else None)  # fmt: skip

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: object, **kwargs: object) -> None:
                return None

        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(request, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    home = tmp_path_factory.mktemp("iris-team")
    local = LocalCluster(home)
    info = local.up(parse_config(TEAM_FLEET, "team fleet"))
    clients: dict[str, IrisClient] = {}
    try:
        admin_file = home / "admin.token"
        assert 0o600 == admin_file.stat().st_mode & 0o777
        tokens = {"admin": admin_file.read_text().strip()}
        team = Team(local, info.dashboard_url, tokens, clients)
        users = (("ana", ()), ("bob", ()), ("agent", ("--worker",)))
        made_all = concurrently(*(functools.partial(team.cli, "admin", "auth", "add-user", name, *flags)
                                  for name, flags in users))  # fmt: skip
        for (name, _), made in zip(users, made_all, strict=True):
            assert 0 == made.returncode, made.stderr
            assert 1 == len(made.stdout.splitlines())
            tokens[name] = made.stdout.strip()
        for name in ("admin", "ana", "bob"):
            clients[name] = IrisClient.connect(info.dashboard_url, token=tokens[name])
        yield team
    finally:
        for c in clients.values():
            c.close()
        local.down()


def _submit_child() -> str:
    """Runs in a task: submits a child job through the task's own connection, returns its id."""
    with IrisClient.connect() as client:
        return client.submit_command(["sleep", "600"], name="child", resources=SMALL).job_id


def sleeper(team: Team, owner: str = "ana") -> Job:
    job = team.clients[owner].submit_command(["sleep", "600"], name="sleeper", resources=SMALL)
    wait_until(lambda: job.status().state == JobState.RUNNING, timeout=60)
    return job


def test_jobs_belong_to_their_verified_submitter(team: Team) -> None:
    """A job's user is the token's; naming another user is refused; everyone may read everyone's jobs."""
    job = team.clients["ana"].submit(lambda: 6 * 7, name="answer", resources=SMALL)
    assert "ana" == team.clients["bob"].job_status(job.job_id).user
    assert job.job_id in [j.job_id for j in team.clients["bob"].list_jobs(user="ana")]
    with (
        IrisClient.connect(team.url, token=team.tokens["ana"], user="bob") as posing,
        pytest.raises(PermissionDeniedError, match="ana may not submit as bob"),
    ):
        posing.submit(lambda: 1, resources=SMALL)
    assert JobState.SUCCEEDED == job.wait(timeout=60).state
    stolen = pb.JobRequest(
        name="steal", user="ana", entrypoint=pb.Entrypoint(function_blob=f"jobs/{job.job_id}/function")
    )
    with pytest.raises(ValueError, match="request: a job runs a command"):  # another job's function is not a job
        team.clients["bob"]._run(team.clients["bob"]._async._submit(stolen, None, None, frozenset()))  # type: ignore[attr-defined]


def test_iris_run_and_named_submissions_work_with_a_token(team: Team) -> None:
    """`iris run` with a user's token runs the job as that user and prints its output; `if_exists` goes
    through the API as it does locally (a reused job is the caller's own, nothing new is started)."""
    ran = team.cli("ana", "run", "--name", "hello-team", "--cpu", "0.1", "--memory", "64m", "--",
                   "sh", "-c", "echo hello from $IRIS_TASK_INDEX")  # fmt: skip
    assert 0 == ran.returncode, ran.stderr
    assert "hello from 0" in ran.stdout
    first = team.clients["ana"].submit_command(["sleep", "600"], name="once", resources=SMALL, if_exists="reuse")
    again = team.clients["ana"].submit_command(["sleep", "600"], name="once", resources=SMALL, if_exists="reuse")
    assert first.job_id == again.job_id and "ana" == again.status().user
    with pytest.raises(ValueError, match=r"job .* named 'once' is"):
        team.clients["ana"].submit_command(["true"], name="once", resources=SMALL, if_exists="fail")
    with pytest.raises(PermissionDeniedError):
        team.clients["bob"].terminate(first.job_id)
    team.clients["ana"].terminate(first.job_id)


def sdk_modules(team: Team, *args: str) -> list[str]:
    """The `temporalio` modules `iris ARGS`, run as ana, imports; AssertionError if the command fails."""
    done, names = command_imports(args, team.env("ana"))
    assert 0 == done.returncode, done.stderr[-2000:]
    return sorted(m for m in names if m.startswith("temporalio"))


def test_team_mode_clients_load_no_temporal_sdk(team: Team) -> None:
    """A team-mode client is HTTP to the Iris API: `iris run`, the job reads, the queue, the tables, the
    schedules, `task exec` and the bug report, and the Python client's connect, submit, wait and listings
    import no `temporalio` (each command paid ~0.55 s of CPU for it, of ~0.7 s, until 2026-12-06; a schedule
    command until later that day; `task exec` and `job bug-report` until 2026-12-07)."""
    job = team.clients["ana"].submit_command(["true"], name="light", resources=SMALL)
    running = sleeper(team)
    commands = [
        ("run", "--name", "light-run", "--cpu", "0.1", "--memory", "64m", "--", "true"),
        ("job", "status", job.job_id), ("job", "summary", job.job_id), ("job", "logs", job.job_id),
        ("job", "list"), ("queue",), ("team", "list"), ("user", "list"), ("worker", "list"), ("schedule", "list"),
        ("schedule", "create", "light-sched", "--cron", "0 3 * * *", "--cpu", "0.1", "--memory", "64m", "--", "true"),
        ("task", "exec", running.job_id, "--", "true"), ("job", "bug-report", job.job_id, "--output", "-"),
    ]  # fmt: skip
    api = ("import sys\nfrom iris import IrisClient, ResourceSpec\nwith IrisClient.connect() as client:\n"
           "    small = ResourceSpec(cpu=0.1, memory='64m')\n"
           "    client.submit_command(['true'], name='light-api', resources=small).wait(timeout=60)\n"
           "    client.list_jobs()\n"
           "    client.list_schedules()\n"
           "print(sorted(m for m in sys.modules if m.startswith('temporalio')))")  # fmt: skip

    def python_client() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", api], env=team.env("ana"), capture_output=True, text=True,
                              timeout=120)  # fmt: skip

    client_run, *imported = concurrently(python_client, *(functools.partial(sdk_modules, team, *c) for c in commands))
    assert (0, "[]") == (client_run.returncode, client_run.stdout.strip()), client_run.stderr[-2000:]
    assert {c: [] for c in commands} == dict(zip(commands, imported, strict=True))
    running.terminate()


def test_a_child_job_belongs_to_its_root_jobs_user(team: Team) -> None:
    """A job submitted from ana's task is ana's: bob cannot kill it or read its logs; ana can kill it."""
    parent = team.clients["ana"].submit(_submit_child, name="parent", resources=CLIENT_TASK)
    parent.wait(timeout=90)
    child_id = parent.results()[0]
    assert child_id.startswith(parent.job_id + "/")
    assert "ana" == team.clients["bob"].job_status(child_id).user
    with pytest.raises(PermissionDeniedError, match="belongs to ana"):
        team.clients["bob"].terminate(child_id)
    with pytest.raises(PermissionDeniedError, match="belongs to ana"):
        team.clients["bob"].fetch_task_logs(child_id, 0)
    team.clients["ana"].terminate(child_id)
    assert team.clients["ana"].job(child_id).wait(timeout=60, raise_on_failure=False).done


def _what_a_task_holds() -> dict[str, str]:
    """Runs in a task: the connection settings it was given, its token, and who the Iris API says it is."""
    import json
    import os
    import urllib.request
    from pathlib import Path

    held = {k: v for k, v in os.environ.items() if k.startswith(("IRIS_TEMPORAL_", "IRIS_TOKEN", "IRIS_CODEC"))}
    held["IRIS_STORE"] = os.environ.get("IRIS_STORE", "")
    token = Path(os.environ["IRIS_TOKEN_FILE"]).read_text().strip()
    request = urllib.request.Request(os.environ["IRIS_TEMPORAL_ADDRESS"] + "/api/v1/whoami",
                                     headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        held["whoami"] = json.dumps(json.loads(answer.read()), sort_keys=True)
    held["token"] = token
    return held


def test_a_task_holds_its_jobs_token_and_nothing_that_opens_temporal(team: Team) -> None:
    """A task of ana's gets the Iris API's address and a token for its job (acting as ana, while the job runs),
    no Temporal address, TLS file, API key, codec key or store; the token dies with the job; one forged for
    another job is refused."""
    job = team.clients["ana"].submit(_what_a_task_holds, name="holder", resources=SMALL)
    assert JobState.SUCCEEDED == job.wait(timeout=90).state
    held = job.results()[0]
    token = held.pop("token")
    assert {"name": "ana", "role": "user", "via": "task"} == json.loads(held.pop("whoami"))
    assert {"IRIS_TEMPORAL_ADDRESS": team.url, "IRIS_TOKEN_FILE": held["IRIS_TOKEN_FILE"], "IRIS_STORE": ""} == held
    assert token.startswith("iris-task:") and not Path(held["IRIS_TOKEN_FILE"]).exists()  # gone with its attempt

    def refused(token: str) -> bool:
        request = urllib.request.Request(team.url + "/api/v1/whoami",
                                         headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=30).close()
        except urllib.error.HTTPError as err:
            return 401 == err.code
        return False

    wait_until(lambda: refused(token), timeout=10, what="the ended job's task token refused")
    _, encoded, mac = token.split(":")
    another = base64.urlsafe_b64encode(f"{job.job_id}-other".encode()).decode().rstrip("=")
    assert refused(f"iris-task:{another}:{mac}")  # the same MAC for another job
    assert refused(f"iris-task:{encoded}:{'0' * 64}")
    credits = team.clients["ana"].submit(_try_credits, name="credits", resources=CLIENT_TASK)
    assert JobState.SUCCEEDED == credits.wait(timeout=90).state
    assert ["refused"] == credits.results()


def test_a_worker_credential_serves_as_an_agent_and_nothing_else_does(team: Team, tmp_path: Path) -> None:
    """`iris worker serve --temporal API_URL` with a worker credential asks the API where the control plane is,
    registers and runs tasks that reach that API (not Temporal); a user's token, no token and a revoked worker
    credential are refused in one line, exit 3, before anything starts."""
    serve = ("worker", "serve", "--temporal", team.url, "--cpu", "1", "--memory", "1g", "--task-user", "",
             "--attribute", "taint:enrolled=true", "--attribute", "pool=enrolled")  # fmt: skip
    refusals = (("ana", "ana (user) may not serve as an agent"), (None, "needs a worker credential"))
    *refused_all, made = concurrently(
        *(functools.partial(team.cli, who, *serve, "--worker-id", "intruder") for who, _ in refusals),
        functools.partial(team.cli, "admin", "auth", "add-user", "host-pool", "--worker"),
    )
    for (_, words), refused in zip(refusals, refused_all, strict=True):
        assert 3 == refused.returncode, refused.stderr
        assert [True] == [words in line for line in refused.stderr.splitlines()], refused.stderr
    assert "intruder" not in {w.worker_id for w in team.clients["admin"].list_workers()}
    env = {**team.env(None), "IRIS_TOKEN": made.stdout.strip()}
    log = (tmp_path / "agent.log").open("w")
    agent = subprocess.Popen([sys.executable, "-m", "iris", *serve, "--worker-id", "enrolled"], env=env,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        job = team.clients["ana"].submit(_what_a_task_holds, name="on-enrolled", resources=SMALL,
                                         constraints=[Constraint("pool", "EQ", "enrolled")], tolerations=["enrolled"])
        assert JobState.SUCCEEDED == job.wait(timeout=120).state, (tmp_path / "agent.log").read_text()[-2000:]
        held = job.results()[0]
        assert {"name": "ana", "role": "user", "via": "task"} == json.loads(held["whoami"])
        assert team.url == held["IRIS_TEMPORAL_ADDRESS"] and "" == held["IRIS_STORE"]
        assert "enrolled" == job.status().tasks[0].worker_id
    finally:
        agent.terminate()
        agent.wait(timeout=60)
        log.close()
    assert 0 == team.cli("admin", "auth", "revoke", "host-pool").returncode

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "iris", *args], env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip

    wait_until(lambda: 3 == run("auth", "whoami").returncode, timeout=10, what="the worker credential revoked")
    revoked = run(*serve, "--worker-id", "enrolled")
    assert 3 == revoked.returncode and 1 == len(revoked.stderr.splitlines()), revoked.stderr


def _try_credits() -> str:
    """Runs in a task: whether its token may set credits (an admin's action)."""
    with IrisClient.connect() as client:
        try:
            client.set_credits("ana", 10**6)
        except PermissionDeniedError:
            return "refused"
    return "allowed"


def test_a_jobs_name_is_its_users_own(team: Team) -> None:
    """bo submits a job named as ana's step, into ana's namespace: ana's `reuse` does not take bo's job (it would
    skip her step and hand her results she may not read), and her `fail` does not count it."""
    ana, bo = team.clients["ana"], team.clients["bob"]
    theirs = bo.submit_command(["sleep", "600"], name="prep-2026-12-01", namespace="ana", resources=SMALL)
    try:
        wait_until(lambda: theirs.job_id in [j.job_id for j in ana.list_jobs(name="prep-2026-12-01")], timeout=60,
                   what="bo's job listed")  # fmt: skip
        mine = ana.submit_command(["true"], name="prep-2026-12-01", if_exists="reuse", resources=SMALL)
        assert mine.job_id != theirs.job_id and "ana" == mine.status().user
        final = mine.wait(timeout=120)
        assert (JobState.SUCCEEDED, "vision") == (final.state, final.team)  # wait() gives the team as status() does
        again = ana.submit_command(["true"], name="prep-2026-12-01", if_exists="fail", resources=SMALL)
        assert again.job_id not in (mine.job_id, theirs.job_id)
    finally:
        bo.terminate(theirs.job_id)


def test_every_user_reads_the_queue_the_teams_and_the_autoscaler(team: Team) -> None:
    """The spec's reads for everyone (queue, like list_users and list_workers) and the team table and
    autoscaler status beside them answer a user in team mode, through the client and the CLI."""
    waiting = team.clients["bob"].submit_command(["true"], name="never-fits", resources=ResourceSpec(cpu=64))
    try:

        def queued() -> subprocess.CompletedProcess[str]:
            wait_until(lambda: waiting.job_id in [r.job_id for r in team.clients["ana"].queue()], timeout=60,
                       what="the unplaceable job in the queue")  # fmt: skip
            return team.cli("ana", "queue")

        # While work waits the scheduler publishes its queue at most every 5 s: the other reads go meanwhile.
        reads = ((("queue",), waiting.job_id), (("team", "list"), "vision"),
                 (("autoscaler", "status"), "no scale groups"))  # fmt: skip
        results = concurrently(queued, *(functools.partial(team.cli, "ana", *args) for args, _ in reads[1:]))
        assert "vision" in [t.team for t in team.clients["bob"].list_teams()]
        for (args, shown), result in zip(reads, results, strict=True):
            assert 0 == result.returncode and shown in result.stdout, (args, result.stdout, result.stderr)
    finally:
        team.clients["bob"].terminate(waiting.job_id)


def test_schedules_are_their_creators(team: Team) -> None:
    """A user creates a schedule as themselves (its jobs are theirs); everyone lists and reads it; pausing,
    triggering or deleting it is its creator's or an admin's; naming another user is refused."""
    ana, bob = team.clients["ana"], team.clients["bob"]
    sched = ana.create_schedule("ana-nightly", pow, 6, 2, cron="0 3 * * *", resources=SMALL)
    try:
        assert "ana" == bob.schedule("ana-nightly").status().user
        assert "ana-nightly" in [s.name for s in bob.list_schedules()]
        with pytest.raises(PermissionDeniedError, match=r"bob \(user\) may not pause, unpause, trigger or delete "
                                                        r"schedule ana-nightly: it belongs to ana"):  # fmt: skip
            bob.schedule("ana-nightly").pause()
        refused, listed = concurrently(functools.partial(team.cli, "bob", "schedule", "delete", "ana-nightly"),
                                       functools.partial(team.cli, "bob", "schedule", "list"))  # fmt: skip
        assert 3 == refused.returncode and "it belongs to ana" in refused.stderr, refused.stderr
        assert 0 == listed.returncode and "ana-nightly" in listed.stdout, listed.stderr
        sched.trigger()
        wait_until(lambda: sched.jobs(), timeout=60, what="the triggered job")
        job = sched.jobs()[0]
        assert "ana" == job.wait(timeout=120).user
        assert [36] == job.results()
        with (
            IrisClient.connect(team.url, token=team.tokens["ana"], user="bob") as posing,
            pytest.raises(PermissionDeniedError, match="ana may not create_schedule as bob"),
        ):
            posing.create_command_schedule("as-bob", ["true"], cron="0 3 * * *", resources=SMALL)
    finally:
        team.clients["admin"].schedule("ana-nightly").delete()
    assert "ana-nightly" not in [s.name for s in ana.list_schedules()]


def test_results_and_logs_are_the_owners_and_admins(team: Team) -> None:
    """results() and logs: the owner and an admin read them, another user is refused naming job and owner."""
    job = team.clients["ana"].submit(lambda: print("hello from ana") or 42, name="private", resources=SMALL)
    job.wait(timeout=60)
    for who in ("ana", "admin"):
        assert [42] == team.clients[who].job(job.job_id).results()
        assert "hello from ana" in "".join(team.clients[who].fetch_task_logs(job.job_id, 0))
    bob = team.clients["bob"]
    with pytest.raises(PermissionDeniedError, match=f"job {job.job_id}: it belongs to ana"):
        bob.job(job.job_id).results()
    with pytest.raises(PermissionDeniedError, match="it belongs to ana"):
        bob.fetch_task_logs(job.job_id, 0)
    refused, read = concurrently(*(functools.partial(team.cli, who, "job", "logs", job.job_id)
                                   for who in ("bob", "admin")))  # fmt: skip
    assert (3, "") == (refused.returncode, refused.stdout)
    assert 1 == len(refused.stderr.strip().splitlines()) and "belongs to ana" in refused.stderr
    assert "hello from ana" in read.stdout
    assert "hello from ana" in team.http("GET", f"/jobs/{job.job_id}", "ana")[1]  # the dashboard's log tail
    page = team.http("GET", f"/jobs/{job.job_id}", "bob")[1]
    assert "hello from ana" not in page and "for its owner and admins" in page


def test_an_admin_reading_a_users_results_runs_none_of_their_code(team: Team, tmp_path: Path) -> None:
    """A value whose pickle names os.system ran it in the admin's process when the admin read the results
    (with the admin's token at hand): another user's values are read as plain data only, unless trusted."""
    marker = tmp_path / "ran-in-the-readers-process"

    def crafted(path: str) -> object:
        import os

        class Payload:
            def __reduce__(self) -> tuple[object, tuple[str]]:
                return os.system, (f"touch {path}",)

        return Payload()

    job = team.clients["ana"].submit(crafted, str(marker), name="crafted", resources=SMALL)
    job.wait(timeout=60)
    assert not marker.exists()  # the task built it; nothing was unpickled yet
    with pytest.raises(PermissionDeniedError, match=r"task 0 returned a posix\.system; another user's \(ana\)"):
        team.clients["admin"].job(job.job_id).results()
    assert not marker.exists()
    plain = team.clients["ana"].submit(lambda: {"a": [1, 2.5], "b": b"x", "c": {3}}, name="plain", resources=SMALL)
    plain.wait(timeout=60)
    assert [{"a": [1, 2.5], "b": b"x", "c": {3}}] == team.clients["admin"].job(plain.job_id).results()


def test_a_bug_report_is_the_owners_and_admins_and_shows_no_control_plane_address(team: Team) -> None:
    """`iris job bug-report` works with a token (the controller writes it): for the owner and an admin, refused
    for another user (its log tails are the job's output), and it names no address behind Iris's checks."""
    job = team.clients["ana"].submit_command(["sh", "-c", "echo report-me; exit 3"], name="broken", resources=SMALL)
    assert JobState.FAILED == job.wait(timeout=120, raise_on_failure=False).state
    report = ("job", "bug-report", job.job_id, "--output", "-")
    *made_all, refused = concurrently(*(functools.partial(team.cli, who, *report) for who in ("ana", "admin", "bob")))
    for made in made_all:  # ana's and the admin's
        assert 0 == made.returncode, made.stderr
        assert f"# Iris bug report: job `{job.job_id}`" in made.stdout and "report-me" in made.stdout
        assert "the cluster's own (team mode)" in made.stdout
    assert 3 == refused.returncode and "belongs to ana" in refused.stderr, refused.stderr


def test_kill_is_the_owners_and_admins(team: Team) -> None:
    """Another user cannot kill (client, CLI, dashboard); the owner and an admin can (client, CLI, dashboard)."""
    jobs = concurrently(*[functools.partial(sleeper, team)] * 3)
    with pytest.raises(PermissionDeniedError, match="bob \\(user\\) may not kill job"):
        team.clients["bob"].terminate(jobs[0].job_id)
    info = team.local.status()
    assert info is not None  # a token with the cluster's own Temporal address still goes through the checks
    refused, refused_with_temporal, killed = concurrently(
        functools.partial(team.cli, "bob", "job", "kill", jobs[0].job_id),
        functools.partial(team.cli, "bob", "job", "kill", jobs[0].job_id, "--temporal", info.address),
        functools.partial(team.cli, "admin", "job", "kill", jobs[1].job_id),
    )
    assert (3, 3) == (refused.returncode, refused_with_temporal.returncode)
    assert 403 == team.http("POST", f"/kill/{jobs[0].job_id}", "bob")[0]
    assert "Kill this job" not in team.http("GET", f"/jobs/{jobs[0].job_id}", "bob")[1]
    for who in ("ana", "admin"):
        assert "Kill this job" in team.http("GET", f"/jobs/{jobs[0].job_id}", who)[1]
    assert JobState.RUNNING == jobs[0].status().state
    assert team.clients["ana"].terminate(jobs[0].job_id)
    assert 0 == killed.returncode
    assert 303 == team.http("POST", f"/kill/{jobs[2].job_id}", "ana")[0]
    # The audit log is read while the kills land: each kill and refusal above was answered, so it is logged.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        audited = pool.submit(team.cli, "admin", "auth", "audit", "--since", "5m")
        for job in jobs:
            assert JobState.KILLED == job.wait(timeout=60, raise_on_failure=False).state
        audit = audited.result().stdout
    assert "kill (refused)" in audit and jobs[2].job_id in audit


def test_exec_is_the_owners_and_admins(team: Team) -> None:
    """`iris task exec` runs for the owner and an admin; another user is refused with exit 3."""
    job = sleeper(team)
    try:
        *done_all, refused, profile_refused = concurrently(
            *(functools.partial(team.cli, who, "task", "exec", job.job_id, "--", "echo", f"hi-{who}")
              for who in ("ana", "admin")),
            functools.partial(team.cli, "bob", "task", "exec", job.job_id, "--", "echo", "hi"),
            functools.partial(team.cli, "bob", "task", "profile", job.job_id, "--duration", "2"),
        )  # fmt: skip
        for who, done in zip(("ana", "admin"), done_all, strict=True):
            assert (0, f"hi-{who}\n") == (done.returncode, done.stdout), done.stderr
        assert 3 == refused.returncode and "belongs to ana" in refused.stderr
        assert (3, 1) == (profile_refused.returncode, len(profile_refused.stderr.splitlines())), profile_refused.stderr
        assert "belongs to ana" in profile_refused.stderr
        audit = [line for line in team.cli("admin", "auth", "audit", "--since", "5m").stdout.splitlines()
                 if job.job_id in line and "refused" in line]  # fmt: skip
        assert any(" profile " in f" {line} " for line in audit), audit  # it was audited as an exec
    finally:
        team.clients["ana"].terminate(job.job_id)
        job.wait(timeout=60, raise_on_failure=False)  # its charge is in before the next test sets credits


def test_operator_actions_are_admins_only(team: Team) -> None:
    """Credits and cordon: a user is refused (client and CLI, exit 3), an admin succeeds."""
    worker = team.clients["ana"].list_workers()[0].worker_id
    with pytest.raises(PermissionDeniedError, match="may not set credits"):
        team.clients["ana"].set_credits("ana", 1_000_000)
    with pytest.raises(PermissionDeniedError, match="admins only"):
        team.clients["ana"].cordon_worker(worker)

    def admin_sets_credits() -> subprocess.CompletedProcess[str]:
        # A balance set while ana still runs a task would be charged for it when it ends: none runs now.
        wait_until(lambda: all(u.running_tasks == 0 for u in team.clients["admin"].list_users() if u.user == "ana"),
                   timeout=60, what="ana's tasks released")  # fmt: skip
        team.clients["admin"].set_credits("ana", 123)
        return team.cli("admin", "user", "credits", "bob", "77")

    # The CLI's refusals (the last two for the audit log below) and the admin's credits, at once.
    credits_refused, cordon_refused, revoke_refused, agent_refused, credits_set = concurrently(
        functools.partial(team.cli, "ana", "user", "credits", "ana", "1000000"),
        functools.partial(team.cli, "ana", "worker", "cordon", worker),
        functools.partial(team.cli, "ana", "auth", "revoke", "bob"),
        functools.partial(team.cli, "agent", "job", "list"),
        admin_sets_credits,
    )
    assert (3, 3) == (credits_refused.returncode, cordon_refused.returncode)
    assert 0 == credits_set.returncode
    wait_until(lambda: {u.user: u.credits for u in team.clients["bob"].list_users()}.get("ana") == 123, timeout=90,
               what="ana's credits set by the admin")  # fmt: skip
    shown = team.cli("bob", "user", "credits", "ana")  # reading a balance is anyone's
    assert (0, "ana: 123.00 credits left") == (shown.returncode, shown.stdout.split(",")[0].strip()), shown.stderr
    team.clients["admin"].cordon_worker(worker)
    wait_until(lambda: [w.cordoned for w in team.clients["ana"].list_workers() if w.worker_id == worker] == [True],
               timeout=30, what="the cordon seen")  # fmt: skip
    listed, audited = concurrently(functools.partial(team.cli, "ana", "worker", "list"),
                                   functools.partial(team.cli, "admin", "auth", "audit", "--since", "5m"))  # fmt: skip
    team.clients["admin"].cordon_worker(worker, cordoned=False)
    row = next(line for line in listed.stdout.splitlines() if worker in line)
    assert row.split("│")[3].strip() == "yes", row  # the CORDONED column
    # Every refusal is in the audit log, whichever route refused it.
    assert (3, 3) == (revoke_refused.returncode, agent_refused.returncode)
    audit = audited.stdout
    assert "revoke (refused)" in audit and "read (refused)" in audit, audit
    refused = next(line for line in audit.splitlines() if "revoke (refused)" in line)
    assert "ana" in refused and "bob" in refused, refused  # who tried, and on whom


def test_revoking_a_user_pauses_their_schedules(team: Team) -> None:
    """A revoked user's schedule would go on starting jobs as them: revoking them pauses it."""
    made = team.cli("admin", "auth", "add-user", "cy")
    assert 0 == made.returncode, made.stderr
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # While cy makes a schedule, the name is tried again: not a usage error, the name is taken (exit 1).
        trying = pool.submit(team.cli, "admin", "auth", "add-user", "cy")
        with IrisClient.connect(team.url, token=made.stdout.strip()) as cy:
            cy.create_command_schedule("cy-hourly", ["true"], cron="0 * * * *", resources=SMALL)
        taken = trying.result()
    try:
        assert 1 == taken.returncode and "user cy exists" in taken.stderr, taken.stderr
        assert 0 == team.cli("admin", "auth", "revoke", "cy").returncode
        status = team.clients["admin"].schedule("cy-hourly").status()
        assert status.paused and () == status.next_runs
    finally:
        team.clients["admin"].schedule("cy-hourly").delete()


def test_credentials(team: Team) -> None:
    """No token and a bogus one are AuthenticationError; a worker credential cannot submit; whoami names the caller."""
    with pytest.raises(AuthenticationError):
        IrisClient.connect(team.url)
    with pytest.raises(AuthenticationError):
        IrisClient.connect(team.url, token="iris_nobody_xxxxxxxx")
    with (
        IrisClient.connect(team.url, token=team.tokens["agent"]) as agent,
        pytest.raises(PermissionDeniedError, match="worker credential"),
    ):
        agent.submit(lambda: 1, resources=SMALL)
    whoami, anonymous, missing, promoted = concurrently(
        functools.partial(team.cli, "ana", "auth", "whoami"),
        functools.partial(team.cli, None, "job", "list"),
        lambda: subprocess.run([sys.executable, "-m", "iris", "auth", "whoami"], capture_output=True, text=True,
                               env={**team.env(None), "IRIS_TOKEN_FILE": "/nonexistent/token"}, timeout=60),
        functools.partial(team.cli, "ana", "auth", "add-user", "mallory", "--admin"),
    )  # fmt: skip
    assert "ana user\n" == whoami.stdout
    assert 3 == anonymous.returncode
    assert (3, 1) == (missing.returncode, len(missing.stderr.splitlines())), missing.stderr
    assert "IRIS_TOKEN_FILE: cannot read /nonexistent/token" in missing.stderr
    assert 3 == promoted.returncode


def test_dashboard_needs_a_credential(team: Team) -> None:
    """Without a credential every page is 401 (a login page for a browser); with a bearer token it renders; the
    audit page is an admin's."""
    status, body = team.http("GET", "/queue")
    assert 401 == status and 'action="/login"' in body
    assert 401 == team.http("GET", "/api/v1/jobs", accept="application/json")[0]
    status, body = team.http("GET", "/queue", "bob")
    assert 200 == status and "/audit" not in body
    assert 403 == team.http("GET", "/audit", "bob")[0]
    assert 403 == team.http("GET", "/jobs", "agent")[0]  # a worker credential serves as an agent, nothing else
    assert 403 == team.http("GET", "/queue", "agent", accept="application/json")[0]
    status, body = team.http("GET", "/audit", "admin")
    assert 200 == status and 'data-action="add-user"' in body


def test_dashboard_login_sets_a_cookie(team: Team) -> None:
    """The login page takes a token and sets an HttpOnly cookie that opens the pages; a wrong token gets 401."""
    import http.cookiejar
    import urllib.parse

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    form = urllib.parse.urlencode({"token": team.tokens["bob"]}).encode()
    with opener.open(urllib.request.Request(team.url + "/login", data=form), timeout=30) as response:
        assert 200 == response.status and response.url.endswith("/queue")  # followed the redirect, with the cookie
        assert "bob (user)" in response.read().decode()
    assert ["iris_token"] == [c.name for c in jar]
    assert jar.__iter__().__next__().has_nonstandard_attr("HttpOnly")
    wrong = urllib.parse.urlencode({"token": "iris_x_wrong"}).encode()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(team.url + "/login", data=wrong), timeout=30)
    assert 401 == refused.value.code
    # Sent to the login page by another page, a sign-in goes on to that page (it always went to the queue);
    # an address elsewhere is not followed.
    with pytest.raises(urllib.error.HTTPError) as asked:
        urllib.request.urlopen(urllib.request.Request(team.url + "/workers", headers={"Accept": "text/html"}))
    assert 'name="next" value="/workers"' in asked.value.read().decode()
    for next_path, lands in (("/workers", "/workers"), ("//evil.example/x", "/queue")):
        back = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        form = urllib.parse.urlencode({"token": team.tokens["bob"], "next": next_path}).encode()
        with back.open(urllib.request.Request(team.url + "/login", data=form), timeout=30) as response:
            assert 200 == response.status and response.url == team.url + lands


async def test_codec_server_takes_an_admins_iris_token(team: Team) -> None:
    """`iris codec-server --iris-api URL`: an admin's token decodes; a user's token or none is refused (401)."""
    from aiohttp.test_utils import TestServer

    from iris.auth.codec_gate import IrisApiAuth
    from iris.security.codec_server import make_app
    from tests.test_codec_server import SECRET, _codec, _plaintext, _post

    server = TestServer(make_app(_codec(), (), IrisApiAuth(team.url)), host="127.0.0.1")
    await server.start_server()
    try:
        status, body, _ = await _post(server, {"Authorization": f"Bearer {team.tokens['admin']}"})
        assert (200, SECRET) == (status, json.loads(_plaintext(body)))
        status, body, _ = await _post(server, {"Authorization": f"Bearer {team.tokens['bob']}"})
        assert 401 == status and "admins only" in body["error"]
        assert 401 == (await _post(server, {}))[0]
    finally:
        await server.close()


def test_revoked_token_stops_within_10_s(team: Team) -> None:
    """After `iris auth revoke`, the token is refused within 10 s."""
    made = team.cli("admin", "auth", "add-user", "carol")
    token = made.stdout.strip()
    with IrisClient.connect(team.url, token=token) as carol:
        assert "carol" == carol._async.user  # type: ignore[attr-defined]
        revoked_at = time.monotonic()
        assert 0 == team.cli("admin", "auth", "revoke", "carol").returncode

        def refused() -> bool:
            try:
                carol.list_jobs(limit=1)
            except AuthenticationError:
                return True
            return False

        assert wait_until(refused, timeout=10)
        assert time.monotonic() - revoked_at < 10


def test_printed_addresses_do_not_open_temporal(team: Team) -> None:
    """`iris cluster status` prints no Temporal address; a temporalio client given each printed address and a
    user's token as its API key cannot list or terminate a workflow."""
    job = sleeper(team, "bob")
    try:
        status = team.cli("ana", "cluster", "status")
        assert 0 == status.returncode and "Auth: tokens" in status.stdout
        info = team.local.status()
        assert info is not None and info.address not in status.stdout
        addresses = {word.split("//", 1)[1].rstrip("/") for word in status.stdout.split() if "://" in word}
        assert addresses

        async def attack(address: str) -> None:
            client = await Client.connect(address, api_key=team.tokens["ana"], rpc_metadata={})
            handle = client.get_workflow_handle(job.job_id)
            with pytest.raises(Exception):  # noqa: B017 - any failure: it must not succeed
                await handle.terminate("attack")
            with pytest.raises(Exception):  # noqa: B017
                [wf async for wf in client.list_workflows(limit=1)]

        import asyncio

        for address in addresses:
            with contextlib.suppress(RuntimeError, TimeoutError):  # not a gRPC server: connecting itself fails
                asyncio.run(asyncio.wait_for(attack(address), 30))
        assert JobState.RUNNING == job.status().state
    finally:
        team.clients["bob"].terminate(job.job_id)


def test_the_temporal_ui_is_behind_the_login_for_admins_only(team: Team) -> None:
    """In team mode the dashboard serves the Temporal UI under /temporal: no credential is 401, a user is refused
    (reads too: the UI shows every job's inputs and results), an admin gets its pages and its API, and the
    dashboard's links into the UI go there."""
    job = sleeper(team, "ana")
    try:
        assert 401 == team.http("GET", "/temporal/")[0]
        status, body = team.http("GET", "/temporal/", "ana")
        assert 403 == status and "for admins" in body
        assert 403 == team.http("GET", "/temporal/api/v1/namespaces/default/workflows", "bob", "application/json")[0]
        status, body = team.http("GET", "/temporal/", "admin")
        assert 200 == status and "/temporal/_app/" in body, body[:500]
        asset = re.search(r'"(/temporal/_app/[^"]+\.js)"', body)
        assert asset is not None and 200 == team.http("GET", asset.group(1), "admin", "*/*")[0]  # the UI's code too
        query = urllib.parse.quote(f'WorkflowId = "{job.job_id}"')
        status, body = team.http("GET", f"/temporal/api/v1/namespaces/default/workflows?query={query}", "admin",
                                 "application/json")  # fmt: skip
        assert 200 == status, body[:500]
        assert [job.job_id] == [e["execution"]["workflowId"] for e in json.loads(body)["executions"]]
        status, page = team.http("GET", f"/jobs/{urllib.parse.quote(job.job_id, safe='')}", "admin")
        assert 200 == status and f'href="/temporal/namespaces/default/workflows/{job.job_id}' in page, page[:2000]
    finally:
        team.clients["ana"].terminate(job.job_id)


def test_admin_token_file_is_private(team: Team) -> None:
    """The first admin's token is in $IRIS_HOME/admin.token, readable by its owner only."""
    path = Path(team.local.home) / "admin.token"
    assert 0o600 == path.stat().st_mode & 0o777
