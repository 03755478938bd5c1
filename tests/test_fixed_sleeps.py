"""Tests wait for events, not time: a test sleeps more than a second only to make an outage last.

A fixed sleep followed by an assertion that something did not happen passes whether or not the system had its
chance to do it; a sleep that waits for something is slower than waiting for that thing (`wait_until`). What is
left is the length of a fault a test imposes: a controller or dev server killed, an agent frozen (SIGSTOP) or cut
off, for long enough to pass a timeout. Such a sleep is followed at once by the end of the outage (a restart, a
SIGCONT, a healed link; at most one reading or check of the outage comes between), which this test checks,
reading every test function's source.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MAX_FIXED_SECONDS = 1.0
OUTAGE_ENDS = ("restart", "SIGCONT", "heal")  # what ends the outage a sleep makes last
LOOK_AHEAD = 2  # statements after the sleep (an enclosing `finally:` counts as following it)
# Computed lengths that are not waits, by file and expression.
NOT_WAITS = {("test_scheduler_interleaving.py", "pause"): "a random moment of under 50 ms (rng.random() * 0.05)"}


def _sleep_seconds(statement: ast.stmt) -> float | str | None:
    """The seconds of a `sleep(...)` statement (an expression when not a literal), else None."""
    call = statement.value if isinstance(statement, ast.Expr) else None
    if isinstance(call, ast.Await):
        call = call.value
    if not isinstance(call, ast.Call) or not call.args:
        return None
    func = call.func
    if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) != "sleep":
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, int | float):
        return float(arg.value)
    return ast.unparse(arg)


def _fixed_sleeps(body: list[ast.stmt], after: list[ast.stmt], found: list[tuple[int, str, str]]) -> None:
    """(line, seconds, the statement ending the outage or "") of each sleep in `body` of more than a second or of a
    computed length."""
    for i, statement in enumerate(body):
        following = body[i + 1 :] + after
        if isinstance(statement, ast.Try):
            _fixed_sleeps(statement.body, statement.finalbody + following, found)
            for handler in statement.handlers:
                _fixed_sleeps(handler.body, statement.finalbody + following, found)
            _fixed_sleeps(statement.finalbody, following, found)
            continue
        for field in ("body", "orelse"):
            block = getattr(statement, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                _fixed_sleeps(block, following, found)
        seconds = _sleep_seconds(statement)
        if seconds is None or (isinstance(seconds, float) and seconds <= MAX_FIXED_SECONDS):
            continue
        found.append((statement.lineno, str(seconds), _outage_end(following)))


def _outage_end(following: list[ast.stmt]) -> str:
    """The statement that ends the outage, if it is one of the next LOOK_AHEAD; else ""."""
    for statement in following[:LOOK_AHEAD]:
        text = ast.unparse(statement)
        if any(end in text for end in OUTAGE_ENDS):
            return text
    return ""


def sleeps_in_tests() -> dict[str, list[tuple[int, str, str]]]:
    out = {}
    for path in sorted(TESTS.rglob("*.py")):
        found: list[tuple[int, str, str]] = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                _fixed_sleeps(node.body, [], found)
        if found:
            out[path.relative_to(TESTS).as_posix()] = found
    return out


def test_a_test_sleeps_over_a_second_only_to_make_an_outage_last() -> None:
    sleeps = sleeps_in_tests()
    assert sleeps, "the scan finds the outages' sleeps (faults/): it reads the tests"
    waits = [
        f"{path}:{line} sleep({seconds})"
        for path, found in sleeps.items()
        for line, seconds, end in found
        if not end and (path, seconds) not in NOT_WAITS
    ]
    assert [] == waits, "a fixed sleep that waits for something: wait for the thing itself (wait_until)"


def test_the_scan_sees_a_sleep_that_waits_for_something() -> None:
    source = (
        "def test_x():\n    start()\n    time.sleep(5)\n    assert nothing_happened()\n"
        "def test_y():\n    kill()\n    try:\n        time.sleep(max(0.0, t - time.time()))\n"
        "    finally:\n        kill(pid, signal.SIGCONT)\n"
    )
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            _fixed_sleeps(node.body, [], found)
    assert [(3, "5.0", ""), (8, "max(0.0, t - time.time())", "kill(pid, signal.SIGCONT)")] == found
