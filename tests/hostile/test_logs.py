"""Logs are the task's bytes: unchanged when piped, with the last line kept even without a newline."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from iris import IrisClient, ResourceSpec
from iris.cli.log_output import LogPrinter

from .conftest import iris

SMALL = ResourceSpec(cpu=0.5, memory="256m")
# tabs, wide characters, a carriage return, a 300-column line and a last line with no newline
AWKWARD = "a\tb\t\tc\n宽字符 \uff57\uff49\uff44\uff45 😀\nprogress\r100%\n" + "x" * 300 + "\nno newline at the end"
WRITE_AWKWARD = ["python3", "-c", f"import sys; sys.stdout.write({AWKWARD!r}); sys.stdout.flush()"]


@pytest.fixture(scope="module")
def awkward_job(client: IrisClient) -> str:
    """A finished job whose one task wrote AWKWARD."""
    job = client.submit_command(WRITE_AWKWARD, name="awkward", resources=SMALL)
    job.wait(timeout=120)
    return job.job_id


def test_piped_logs_are_the_tasks_bytes_unchanged(cluster_env: dict[str, str], awkward_job: str) -> None:
    """`iris job logs J > file` holds exactly what the task wrote: no wrapping, prefixes or lost last line."""
    result = subprocess.run(
        [sys.executable, "-m", "iris", "job", "logs", awkward_job], env=cluster_env, capture_output=True, timeout=120
    )
    assert 0 == result.returncode, result.stderr
    assert AWKWARD.encode() == result.stdout


def test_followed_logs_keep_a_last_line_without_newline(client: IrisClient, cluster_env: dict[str, str]) -> None:
    """`iris job logs -f` prints the task's final unterminated line once the task ends."""
    job = client.submit_command(["sh", "-c", "echo first; sleep 1; printf 'the end'"], resources=SMALL)
    result = subprocess.run(
        [sys.executable, "-m", "iris", "job", "logs", job.job_id, "-f"],
        env=cluster_env, capture_output=True, timeout=120,
    )
    assert 0 == result.returncode, result.stderr
    assert b"first\nthe end" == result.stdout


def test_iris_run_streams_a_last_line_without_newline(cluster_env: dict[str, str]) -> None:
    """`iris run` shows the task's last line even when it has no newline (prefixed, as run output is)."""
    result = iris("run", "--cpu", "0.5", "--memory", "256m", "--", "sh", "-c", "echo one; printf two",
                  env=cluster_env)
    assert 0 == result.returncode, result.stderr
    assert ["[0] one", "[0] two"] == result.stdout.splitlines()


def test_prefixes_are_only_at_line_starts(cluster_env: dict[str, str], awkward_job: str) -> None:
    """`--prefix` puts `[i] ` before each line and never inside one (a line split across reads stays whole)."""
    result = subprocess.run(
        [sys.executable, "-m", "iris", "job", "logs", awkward_job, "--prefix"],
        env=cluster_env, capture_output=True, timeout=120,
    )
    expected = "".join(f"[0] {line}\n" for line in AWKWARD.split("\n"))  # the terminal gets the last newline
    assert expected.encode() == result.stdout


def test_a_line_split_across_chunks_gets_one_prefix() -> None:
    """Streaming in pieces: the continuation of a line is not prefixed again; another task's line starts fresh."""
    out = io.BytesIO()
    printer = LogPrinter(out, prefix=True)
    printer.write(0, b"hel")
    printer.write(0, b"lo\nwor")
    printer.write(1, b"other\n")
    printer.write(0, b"ld")
    printer.end()
    assert b"[0] hello\n[0] wor\n[1] other\n[0] ld\n" == out.getvalue()


def test_logs_reach_a_text_only_stream() -> None:
    """A stdout without a byte buffer (a notebook's) still gets the logs, decoded as UTF-8."""
    out = io.StringIO()
    printer = LogPrinter(out, prefix=True)
    printer.write(2, "héllo\nwörld".encode())
    printer.end()
    assert "[2] héllo\n[2] wörld\n" == out.getvalue()
