"""Bad commands, options and ids end with exit 1 or 2 and one line naming what is wrong, never a traceback."""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from iris import Constraint, IrisClient, ResourceSpec
from iris.local.cluster import LocalCluster
from tests.support import Cluster
from workflows.jobs.job_workflow import MAX_REPLICAS

from .conftest import assert_one_line_error, iris

SMALL = ["--cpu", "0.5", "--memory", "256m"]
Ran = subprocess.CompletedProcess[str]
K = TypeVar("K", bound=Hashable)


@dataclass
class Runs:
    """The module's commands: a pool of 4, what it was given (by test function and case) and a directory of
    homes."""

    pool: concurrent.futures.ThreadPoolExecutor
    started: dict[Hashable, concurrent.futures.Future[Ran]]
    homes: Path
    selected: Counter[str]  # how many of each test function's cases are to run


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    selected = Counter(item.originalname for item in request.session.items if isinstance(item, pytest.Function))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        yield Runs(pool, {}, tmp_path_factory.mktemp("cli-errors"), selected)


@dataclass
class AtOnce:
    """A parametrized test's commands, all started when its first case runs; each case still checks its own.

    Nearly every case is one `iris` command, most of it Python starting and importing: one after another they
    were most of this file's time. A test function with one case to run (`-k`) runs just that case's command."""

    runs: Runs
    test: str  # the test function's name

    def result(self, key: K, every: Mapping[K, Callable[[], Ran]]) -> Ran:
        """`every[key]()`'s answer; every other call in `every` started too, each once, unless only this case runs."""
        for k, call in every.items() if self.runs.selected[self.test] > 1 else [(key, every[key])]:
            if (self.test, k) not in self.runs.started:
                self.runs.started[self.test, k] = self.runs.pool.submit(call)
        return self.runs.started[self.test, key].result()

    def pair(self, first: Callable[[], Ran], second: Callable[[], Ran]) -> tuple[Ran, Ran]:
        """Two commands of one case, run at once."""
        started = self.runs.pool.submit(first), self.runs.pool.submit(second)
        return started[0].result(), started[1].result()

    def no_cluster_env(self, key: Hashable) -> dict[str, str]:
        """The `no_cluster_env` of one case: an IRIS_HOME of its own that has never held a cluster."""
        env = {k: v for k, v in os.environ.items() if k not in ("IRIS_TEMPORAL_ADDRESS", "IRIS_STORE")}
        env["IRIS_HOME"] = str(self.runs.homes / hashlib.sha1(repr((self.test, key)).encode()).hexdigest()[:16])
        return env


@pytest.fixture
def at_once(request: pytest.FixtureRequest, runs: Runs) -> AtOnce:
    return AtOnce(runs, request.node.originalname)


TYPOS = [
    (["jbo", "list"], ["No such command 'jbo'", "Did you mean 'job'"]),
    (["job", "lst"], ["No such command 'lst'", "Did you mean 'list'"]),
    (["job", "logs", "j", "--tsk", "1"], ["--tsk", "--task"]),
    (["run", "--nme", "x", "--", "true"], ["--nme", "--name"]),
    (["run", "--replicas", "abc", "--", "true"], ["--replicas"]),
    (["run", "--"], ["command"]),
    (["job", "list", "--stor", "x"], ["--stor", "--store"]),
]


@pytest.mark.parametrize(("args", "fragments"), TYPOS)
def test_a_typo_in_a_command_or_option_gets_a_suggestion(
    at_once: AtOnce, args: list[str], fragments: list[str]
) -> None:
    """Click's usage errors are one line, exit 2, and name the closest command or option."""
    every = {tuple(a): functools.partial(iris, *a, env=at_once.no_cluster_env(tuple(a))) for a, _ in TYPOS}
    assert_one_line_error(at_once.result(tuple(args), every), 2, *fragments)


BAD_RUN_OPTIONS = [
    (["--name", ""], ["--name", "empty"]),
    (["--name", "x" * 5000], ["--name", "5000 characters"]),
    (["--replicas", "0"], ["--replicas"]),
    (["--replicas", str(MAX_REPLICAS + 1)], ["--replicas", "at most"]),
    (["--cpu", "-1"], ["cpu"]),
    (["--memory", "12q"], ["memory", "12q"]),
    (["--memory", "1k"], ["--memory", "0 (no limit) or at least 1MiB", "'1k'"]),
    (["--memory", "1.5"], ["--memory", "a number of bytes must be whole"]),
    (["--memory", "99999999999999999999g"], ["--memory", "at most 9223372036854775807 bytes"]),
    (["--cpu", "1e30"], ["--cpu", "at most 9223372036854774 cores"]),
    (["--cpu", "0.0004"], ["--cpu", "0 or at least 0.001", "granularity"]),
    (["--gpu", str(2**40)], ["--gpu", "at most 2147483647"]),
    (["--tpu", "bogus"], ["--tpu", "bogus"]),
    (["--max-retries", "-1"], ["--max-retries"]),
    (["--scheduling-timeout", "-5"], ["--scheduling-timeout"]),
    (["--coschedule", ""], ["--coschedule"]),
    (["--coschedule", "tpu name"], ["--coschedule", "letters, digits", "'tpu name'"]),
    (["--slices", "2"], ["--slices", "needs --coschedule"]),
    (["--coschedule", "tpu-name", "--slices", "0"], ["--slices", ">= 1"]),
    (["--coschedule", "tpu-name", "--slices", "2", "--replicas", "3"], ["--replicas", "multiple"]),
    (["--image", ""], ["--image"]),
    (["-c", ""], ["--constraint"]),
    (["-c", "=1"], ["--constraint"]),
    (["-c", "k>abc"], ["k", "number"]),
    (["--env", "NOEQUALS"], ["--env", "KEY=VALUE"]),
    (["--env", "IRIS_X=1"], ["IRIS_X", "reserved"]),
    (["-c", "k\x01=1"], ["--constraint", "constraint key must be letters, digits"]),
    (["-c", "my key=1"], ["--constraint", "constraint key must be letters, digits", "'my key'"]),
    (["-c", "zone in "], ["--constraint", "KEY in VALUE", "no value given"]),
    (["-c", "zone notin"], ["--constraint", "KEY notin VALUE", "no value given"]),
    (["--prefer", "zone in"], ["--prefer", "KEY in VALUE", "no value given"]),
    (["--name", os.fsdecode(b"caf\xe9")], ["valid UTF-8", "xe9"]),
    (["--reserve", "foo=1"], ["--reserve 'foo=1'", "unknown key"]),
    (["--reserve", "cpu=1,memory=12q"], ["--reserve", "memory", "12q"]),
    (["--reserve-constraint", "zone=a"], ["--reserve-constraint", "without a reservation"]),
]


@pytest.mark.parametrize(("args", "fragments"), BAD_RUN_OPTIONS)
def test_bad_run_options_are_rejected_before_anything_starts(
    at_once: AtOnce, args: list[str], fragments: list[str]
) -> None:
    """`iris run` checks every option before it connects: exit 2 and one line naming the flag.

    It points at an unreachable Temporal, so an option that is (wrongly) accepted fails with "cannot
    reach Temporal" (exit 1) instead of starting a cluster and submitting a job.
    """
    every = {tuple(a): functools.partial(iris, "run", "--temporal", "127.0.0.1:1", *SMALL, *a, "--", "true",
                                         env=at_once.no_cluster_env(tuple(a)))
             for a, _ in BAD_RUN_OPTIONS}  # fmt: skip
    assert_one_line_error(at_once.result(tuple(args), every), 2, *fragments)
    assert LocalCluster(at_once.no_cluster_env(tuple(args))["IRIS_HOME"]).status() is None


READS = [["job", "list"], ["job", "status", "some-job"], ["job", "logs", "some-job"], ["job", "kill", "some-job"],
         ["worker", "list"], ["cluster", "status"], ["reservation", "list"]]  # fmt: skip


@pytest.mark.parametrize("args", READS)
def test_read_commands_never_start_a_cluster(at_once: AtOnce, args: list[str]) -> None:
    """With no cluster running, a read command says how to start one (exit 1) and starts nothing."""
    every = {tuple(a): functools.partial(iris, *a, env=at_once.no_cluster_env(tuple(a))) for a in READS}
    result = at_once.result(tuple(args), every)
    assert_one_line_error(result, 1, "no local cluster running (start it with `iris cluster up`)")
    assert LocalCluster(at_once.no_cluster_env(tuple(args))["IRIS_HOME"]).status() is None


def test_version_is_printed_by_the_flag_and_the_command(at_once: AtOnce, no_cluster_env: dict[str, str]) -> None:
    """`iris --version` and `iris version` print the same `iris X.Y.Z` line."""
    flag, command = at_once.pair(functools.partial(iris, "--version", env=no_cluster_env),
                                 functools.partial(iris, "version", env=no_cluster_env))  # fmt: skip
    assert 0 == flag.returncode and 0 == command.returncode
    assert flag.stdout == command.stdout
    assert flag.stdout.startswith("iris ") and len(flag.stdout.splitlines()) == 1


def test_run_help_says_what_stdin_a_task_gets(no_cluster_env: dict[str, str]) -> None:
    """Tasks do not read the terminal: `iris run --help` says their stdin is empty."""
    result = iris("run", "--help", env={**no_cluster_env, "COLUMNS": "200"})
    assert 0 == result.returncode
    assert "stdin is empty (/dev/null)" in " ".join(result.stdout.split())


ID_COMMANDS = ["status", "logs", "kill"]
IDS = [("nosuch-1234", "no such job: nosuch-1234"), ("iris-scheduler", "not a job"), ("", "no such job")]


@pytest.mark.parametrize("command", ID_COMMANDS)
@pytest.mark.parametrize(("job_id", "fragment"), IDS)
def test_unknown_and_non_job_ids_are_errors(
    at_once: AtOnce, cluster_env: dict[str, str], command: str, job_id: str, fragment: str
) -> None:
    """A job id that names nothing, or Iris's own scheduler workflow, is `no such job` (exit 1), never "ok"."""
    every = {(c, i): functools.partial(iris, "job", c, i, env=cluster_env) for c in ID_COMMANDS for i, _ in IDS}
    assert_one_line_error(at_once.result((command, job_id), every), 1, fragment)


OUTSIDE_TASKS = ["-1", "2", "99"]


@pytest.mark.parametrize("task", OUTSIDE_TASKS)
def test_logs_of_a_task_the_job_does_not_have(
    at_once: AtOnce, cluster_env: dict[str, str], client: IrisClient, task: str
) -> None:
    """`--task` outside the job's tasks is a usage error naming the valid range, not silence or a traceback."""

    def logs(task: str) -> Ran:
        job = client.submit_command(["true"], resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2))
        return iris("job", "logs", job.job_id, "--task", task, env=cluster_env)

    result = at_once.result(task, {t: functools.partial(logs, t) for t in OUTSIDE_TASKS})
    assert_one_line_error(result, 2, "--task", "0..1", task)


DRAIN_TIMEOUTS = ["-1", "nan"]


@pytest.mark.parametrize("timeout", DRAIN_TIMEOUTS)
def test_a_drain_timeout_below_zero_is_a_usage_error(at_once: AtOnce, timeout: str) -> None:
    """`iris worker drain W --timeout -1` is refused before anything is cordoned: exit 2 naming --timeout."""
    every = {t: functools.partial(iris, "worker", "drain", "q-0", "--timeout", t, "--temporal", "127.0.0.1:1",
                                  env=at_once.no_cluster_env(t))
             for t in DRAIN_TIMEOUTS}  # fmt: skip
    result = at_once.result(timeout, every)
    assert_one_line_error(result, 2, "--timeout must be a number of seconds >= 0", timeout)


ADDRESS_TAKERS = [["job", "list"], ["worker", "drain", "q-0"], ["controller", "serve"]]


@pytest.mark.parametrize("args", ADDRESS_TAKERS)
def test_a_bad_temporal_address_names_where_it_was_set(at_once: AtOnce, args: list[str]) -> None:
    """A bad address names `--temporal` when typed as the flag, IRIS_TEMPORAL_ADDRESS when it came from there."""
    every = {}
    for a in map(tuple, ADDRESS_TAKERS):
        env = at_once.no_cluster_env(a)
        every[a, "flag"] = functools.partial(iris, *a, "--temporal", "notahost", env=env)
        every[a, "variable"] = functools.partial(iris, *a, env={**env, "IRIS_TEMPORAL_ADDRESS": "notahost"})
    flag = at_once.result((tuple(args), "flag"), every)
    line = assert_one_line_error(flag, 2, "--temporal: must be HOST:PORT", "'notahost'")
    assert "IRIS_TEMPORAL_ADDRESS" not in line
    variable = at_once.result((tuple(args), "variable"), every)
    assert_one_line_error(variable, 2, "IRIS_TEMPORAL_ADDRESS: must be HOST:PORT", "'notahost'")


def test_unreachable_temporal_is_one_line(no_cluster_env: dict[str, str]) -> None:
    """`--temporal` pointing at nothing fails in one line that names Temporal."""
    result = iris("job", "list", "--temporal", "127.0.0.1:1", env=no_cluster_env, timeout=120)
    assert_one_line_error(result, 1, "cannot reach Temporal at 127.0.0.1:1")


def test_an_http_address_that_is_no_iris_api_says_so(at_once: AtOnce, cluster: Cluster) -> None:
    """The UI's and the dashboard's addresses that `iris cluster status` prints for a cluster not in team mode, given
    as the address: one line saying it is not an Iris API and where Temporal is named, not "runs in team mode"."""
    env = at_once.no_cluster_env("http")
    ui, dashboard = at_once.pair(
        functools.partial(iris, "job", "list", "--temporal", cluster.info.ui_url, env=env),
        functools.partial(iris, "job", "list", env={**env, "IRIS_TEMPORAL_ADDRESS": cluster.info.dashboard_url}),
    )
    for result, url in ((ui, cluster.info.ui_url), (dashboard, cluster.info.dashboard_url)):
        line = assert_one_line_error(result, 2, f"{url} is not an Iris API", "Temporal HOST:PORT")
        assert "team mode:" not in line


def test_a_port_that_is_not_temporals_says_where_temporal_is(no_cluster_env: dict[str, str], cluster: Cluster) -> None:
    """The Temporal UI's port given as Temporal's (HOST:PORT, as `iris cluster status` prints the UI's address): one
    line that says so, not only the HTTP/2 error the connection ended with."""
    ui = cluster.info.ui_url.removeprefix("http://")
    result = iris("job", "list", "--temporal", ui, env=no_cluster_env, timeout=120)
    assert_one_line_error(result, 1, f"cannot reach Temporal at {ui}", "prints its address as Temporal:")


def test_a_closed_pipe_ends_quietly(cluster_env: dict[str, str], client: IrisClient) -> None:
    """`iris job logs J | head -1` stops without a BrokenPipe traceback."""
    job = client.submit_command(["sh", "-c", "seq 1 200000"], resources=ResourceSpec(cpu=0.5, memory="256m"))
    job.wait(timeout=120)
    pipeline = subprocess.run(
        f"'{sys.executable}' -m iris job logs {job.job_id} | head -1",
        shell=True, env=cluster_env, capture_output=True, text=True, timeout=120,
    )
    assert "1\n" == pipeline.stdout
    assert "Traceback" not in pipeline.stderr and "Error" not in pipeline.stderr, pipeline.stderr


def test_a_nul_in_a_constraint_is_refused_by_the_client(client: IrisClient) -> None:
    """From Python (argv cannot carry NUL), a NUL byte in a constraint key or value is a ValueError naming it."""
    with pytest.raises(ValueError, match=r"constraint key must be letters, digits .*got 'a\\x00b'"):
        client.submit_command(["true"], constraints=[Constraint("a\0b", "EQ", 1)])
    with pytest.raises(ValueError, match=r"constraints\[0\]\.value must not contain NUL"):
        client.submit_command(["true"], constraints=[Constraint("a", "EQ", "x\0")])


def test_a_failed_run_says_why_on_one_unwrapped_line(cluster_env: dict[str, str]) -> None:
    """`iris run` of a missing program exits non-zero and names it on one line, however long (no wrapping)."""
    program = "no-such-program-" + "x" * 100
    result = iris("run", "--cpu", "0.5", "--memory", "256m", "--", program, env=cluster_env)
    assert 1 == result.returncode
    assert "Traceback" not in result.stderr
    [line] = [ln for ln in result.stderr.splitlines() if "FAILED:" in ln]
    assert f"executable '{program}' not found" in line


def test_iris_run_on_the_running_local_cluster_errs_in_one_line(cluster_env: dict[str, str]) -> None:
    """`iris run` found the local cluster by IRIS_HOME and printed "using the local cluster…" before any error:
    two lines on stderr. A running cluster is used without a word; only a start says so."""
    env = {k: v for k, v in cluster_env.items() if k not in ("IRIS_TEMPORAL_ADDRESS", "IRIS_STORE")}
    result = iris("run", "--after", "nope-123", "--", "true", env=env)
    assert_one_line_error(result, 2, "--after[0]: no such job: nope-123")


SERVERS = [["worker", "serve", "--worker-id", "w"], ["controller", "serve"]]


@pytest.mark.parametrize("command", SERVERS)
def test_a_port_out_of_range_names_its_option(at_once: AtOnce, command: list[str]) -> None:
    """`--health-port 99999` failed in bind() with an OverflowError line that named no option."""
    every = {tuple(c): functools.partial(iris, *c, "--temporal", "127.0.0.1:1", "--store", "file:///nowhere",
                                         "--health-port", "99999", env=at_once.no_cluster_env(tuple(c)),
                                         timeout=60)
             for c in SERVERS}  # fmt: skip
    assert_one_line_error(at_once.result(tuple(command), every), 2, "--health-port")


def test_a_short_codec_server_token_names_where_it_came_from(no_cluster_env: dict[str, str], tmp_path: Path) -> None:
    """A token from `--token-file` that is too short is refused naming `--token-file`, not the variable."""
    token = tmp_path / "token"
    token.write_text("sekret")
    key = iris("codec-key", env=no_cluster_env).stdout.strip()
    env = {**no_cluster_env, "IRIS_CODEC_KEY": key}
    result = iris("codec-server", "--port", "1", "--token-file", str(token), env=env)
    assert_one_line_error(result, 2, "--token-file: the codec server's token must be at least 16 characters")
