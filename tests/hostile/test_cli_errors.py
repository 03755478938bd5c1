"""Bad commands, options and ids end with exit 1 or 2 and one line naming what is wrong, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from iris import Constraint, IrisClient, ResourceSpec
from iris.local.cluster import LocalCluster
from workflows.jobs.job_workflow import MAX_REPLICAS

from .conftest import assert_one_line_error, iris

SMALL = ["--cpu", "0.5", "--memory", "256m"]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["jbo", "list"], ["No such command 'jbo'", "Did you mean 'job'"]),
        (["job", "lst"], ["No such command 'lst'", "Did you mean 'list'"]),
        (["job", "logs", "j", "--tsk", "1"], ["--tsk", "--task"]),
        (["run", "--nme", "x", "--", "true"], ["--nme", "--name"]),
        (["run", "--replicas", "abc", "--", "true"], ["--replicas"]),
        (["run", "--"], ["command"]),
        (["job", "list", "--stor", "x"], ["--stor", "--store"]),
    ],
)
def test_a_typo_in_a_command_or_option_gets_a_suggestion(
    no_cluster_env: dict[str, str], args: list[str], fragments: list[str]
) -> None:
    """Click's usage errors are one line, exit 2, and name the closest command or option."""
    assert_one_line_error(iris(*args, env=no_cluster_env), 2, *fragments)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
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
    ],
)
def test_bad_run_options_are_rejected_before_anything_starts(
    no_cluster_env: dict[str, str], args: list[str], fragments: list[str]
) -> None:
    """`iris run` checks every option before it connects: exit 2 and one line naming the flag.

    It points at an unreachable Temporal, so an option that is (wrongly) accepted fails with "cannot
    reach Temporal" (exit 1) instead of starting a cluster and submitting a job.
    """
    result = iris("run", "--temporal", "127.0.0.1:1", *SMALL, *args, "--", "true", env=no_cluster_env)
    assert_one_line_error(result, 2, *fragments)
    assert LocalCluster(no_cluster_env["IRIS_HOME"]).status() is None


@pytest.mark.parametrize(
    "args",
    [
        ["job", "list"],
        ["job", "status", "some-job"],
        ["job", "logs", "some-job"],
        ["job", "kill", "some-job"],
        ["worker", "list"],
        ["cluster", "status"],
        ["reservation", "list"],
    ],
)
def test_read_commands_never_start_a_cluster(no_cluster_env: dict[str, str], args: list[str]) -> None:
    """With no cluster running, a read command says how to start one (exit 1) and starts nothing."""
    result = iris(*args, env=no_cluster_env)
    assert_one_line_error(result, 1, "no local cluster running (start it with `iris cluster up`)")
    assert LocalCluster(no_cluster_env["IRIS_HOME"]).status() is None


def test_version_is_printed_by_the_flag_and_the_command(no_cluster_env: dict[str, str]) -> None:
    """`iris --version` and `iris version` print the same `iris X.Y.Z` line."""
    flag = iris("--version", env=no_cluster_env)
    command = iris("version", env=no_cluster_env)
    assert 0 == flag.returncode and 0 == command.returncode
    assert flag.stdout == command.stdout
    assert flag.stdout.startswith("iris ") and len(flag.stdout.splitlines()) == 1


def test_run_help_says_what_stdin_a_task_gets(no_cluster_env: dict[str, str]) -> None:
    """Tasks do not read the terminal: `iris run --help` says their stdin is empty."""
    result = iris("run", "--help", env={**no_cluster_env, "COLUMNS": "200"})
    assert 0 == result.returncode
    assert "stdin is empty (/dev/null)" in " ".join(result.stdout.split())


@pytest.mark.parametrize("command", ["status", "logs", "kill"])
@pytest.mark.parametrize(
    ("job_id", "fragment"),
    [("nosuch-1234", "no such job: nosuch-1234"), ("iris-scheduler", "not a job"), ("", "no such job")],
)
def test_unknown_and_non_job_ids_are_errors(
    cluster_env: dict[str, str], command: str, job_id: str, fragment: str
) -> None:
    """A job id that names nothing, or Iris's own scheduler workflow, is `no such job` (exit 1), never "ok"."""
    assert_one_line_error(iris("job", command, job_id, env=cluster_env), 1, fragment)


@pytest.mark.parametrize("task", ["-1", "2", "99"])
def test_logs_of_a_task_the_job_does_not_have(
    cluster_env: dict[str, str], client: IrisClient, task: str
) -> None:
    """`--task` outside the job's tasks is a usage error naming the valid range, not silence or a traceback."""
    job = client.submit_command(["true"], resources=ResourceSpec(cpu=0.5, memory="256m", replicas=2))
    result = iris("job", "logs", job.job_id, "--task", task, env=cluster_env)
    assert_one_line_error(result, 2, "--task", "0..1", task)


@pytest.mark.parametrize("timeout", ["-1", "nan"])
def test_a_drain_timeout_below_zero_is_a_usage_error(no_cluster_env: dict[str, str], timeout: str) -> None:
    """`iris worker drain W --timeout -1` is refused before anything is cordoned: exit 2 naming --timeout."""
    result = iris("worker", "drain", "q-0", "--timeout", timeout, "--temporal", "127.0.0.1:1", env=no_cluster_env)
    assert_one_line_error(result, 2, "--timeout must be a number of seconds >= 0", timeout)


@pytest.mark.parametrize("args", [["job", "list"], ["worker", "drain", "q-0"], ["controller", "serve"]])
def test_a_bad_temporal_address_names_where_it_was_set(no_cluster_env: dict[str, str], args: list[str]) -> None:
    """A bad address names `--temporal` when typed as the flag, IRIS_TEMPORAL_ADDRESS when it came from there."""
    flag = iris(*args, "--temporal", "notahost", env=no_cluster_env)
    line = assert_one_line_error(flag, 2, "--temporal: must be HOST:PORT", "'notahost'")
    assert "IRIS_TEMPORAL_ADDRESS" not in line
    variable = iris(*args, env={**no_cluster_env, "IRIS_TEMPORAL_ADDRESS": "notahost"})
    assert_one_line_error(variable, 2, "IRIS_TEMPORAL_ADDRESS: must be HOST:PORT", "'notahost'")


def test_unreachable_temporal_is_one_line(no_cluster_env: dict[str, str]) -> None:
    """`--temporal` pointing at nothing fails in one line that names Temporal."""
    result = iris("job", "list", "--temporal", "127.0.0.1:1", env=no_cluster_env, timeout=120)
    assert_one_line_error(result, 1, "cannot reach Temporal at 127.0.0.1:1")


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


@pytest.mark.parametrize("command", [["worker", "serve", "--worker-id", "w"], ["controller", "serve"]])
def test_a_port_out_of_range_names_its_option(no_cluster_env: dict[str, str], command: list[str]) -> None:
    """`--health-port 99999` failed in bind() with an OverflowError line that named no option."""
    result = iris(*command, "--temporal", "127.0.0.1:1", "--store", "file:///nowhere", "--health-port", "99999",
                  env=no_cluster_env, timeout=60)  # fmt: skip
    assert_one_line_error(result, 2, "--health-port")


def test_a_short_codec_server_token_names_where_it_came_from(no_cluster_env: dict[str, str], tmp_path: Path) -> None:
    """A token from `--token-file` that is too short is refused naming `--token-file`, not the variable."""
    token = tmp_path / "token"
    token.write_text("sekret")
    key = iris("codec-key", env=no_cluster_env).stdout.strip()
    env = {**no_cluster_env, "IRIS_CODEC_KEY": key}
    result = iris("codec-server", "--port", "1", "--token-file", str(token), env=env)
    assert_one_line_error(result, 2, "--token-file: the codec server's token must be at least 16 characters")
