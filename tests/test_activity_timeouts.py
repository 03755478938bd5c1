"""Every activity a workflow starts is retried within seconds when the controller or agent running it dies.

An activity whose worker dies is retried only when one of its timeouts passes. Without a heartbeat timeout
that is its start-to-close: two minutes for the scheduler's deliveries, during which no task was told where
to run (124-127 s in the chaos test after a controller SIGKILL, until 2026-12-03). So each activity started
by a workflow has a heartbeat timeout (and beats), or a start-to-close of at most MAX_SILENT, or a reason here.
"""

from __future__ import annotations

import ast
import importlib
from datetime import timedelta
from pathlib import Path

import workflows

MAX_SILENT = timedelta(seconds=10)
EXEMPT = {
    ("tasks/attempt_stops.py", "STOP_TASK"): "runs on the task's own agent for the kill's grace; when that agent is"
    " gone the attempt's heartbeat timeout ends the attempt anyway, and the workflow cancels it (a kill's stop is"
    " sent beside the cancellation, and nothing waits for it)",
}
STARTS = ("execute_activity", "start_activity")


def _started_activities() -> list[tuple[str, int, str, dict[str, ast.expr]]]:
    """(module file under workflows/, line, activity expression, keywords) of each activity a workflow module starts."""
    found = []
    root = Path(workflows.__file__).parent
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STARTS:
                what = ast.unparse(node.args[0]) if node.args else "?"
                keywords = {k.arg: k.value for k in node.keywords if k.arg}
                found.append((path.relative_to(root).as_posix(), node.lineno, what, keywords))
    return found


def _seconds(module: str, expr: ast.expr) -> float | None:
    """The timeout's value when it can be read without running the workflow (a constant or a literal)."""
    name = "workflows." + module.removesuffix(".py").replace("/", ".")
    namespace = {"timedelta": timedelta, **vars(importlib.import_module(name))}
    try:
        value = eval(compile(ast.Expression(expr), module, "eval"), namespace)  # the workflows' own source
    except Exception:
        return None
    return value.total_seconds() if isinstance(value, timedelta) else None


def test_every_activity_a_workflow_starts_is_retried_soon_after_its_worker_dies() -> None:
    started = _started_activities()
    assert len(started) > 10  # the scan found the workflows' activities
    silent = []
    for module, line, what, keywords in started:
        if "heartbeat_timeout" in keywords or (module, what) in EXEMPT:
            continue
        limit = keywords.get("start_to_close_timeout")
        seconds = _seconds(module, limit) if limit is not None else None
        if seconds is None or seconds > MAX_SILENT.total_seconds():
            silent.append(f"workflows/{module}:{line} {what}: no heartbeat timeout, start-to-close {seconds} s")
    assert [] == silent
