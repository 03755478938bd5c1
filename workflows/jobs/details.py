"""What the Temporal UI shows about a job: Markdown a person can read, not a Python repr.

The UI renders a workflow's summary and details as Markdown. `job_request_markdown` is the
job's fixed description (set once when it starts); `job_status_markdown` is its current
state (set when the state changes). Both are pure functions of the request and status,
so they are safe in workflow code and tested without a server.
"""

from __future__ import annotations

import shlex

from activities.proto import cluster_pb2 as pb
from activities.proto.values import get_attr

_OPS = {"EQ": "=", "NE": "≠", "GT": ">", "GE": "≥", "LT": "<", "LE": "≤"}
_MAX_CELL = 300
"""Longer commands and errors are cut: the UI is a summary, the logs and status have the rest."""


def _code(text: str) -> str:
    """Inline code that survives backticks and pipes inside `text` (it sits in a table cell)."""
    text = " ".join(text.split())
    if len(text) > _MAX_CELL:
        text = text[: _MAX_CELL - 1] + "…"
    fence = "``" if "`" in text else "`"
    return f"{fence}{text.replace('|', '¦')}{fence}"


def _plain(text: str) -> str:
    """Text for a table cell or a paragraph: one line, no table-breaking pipes, bounded."""
    text = " ".join(text.split()).replace("|", "¦")
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 1] + "…"


def _memory(num_bytes: int) -> str:
    size = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if size == int(size) else f"{size:.1f} {unit}"
        size /= 1024
    return f"{num_bytes} B"  # pragma: no cover - the loop always returns


def _constraint(c: pb.Constraint) -> str:
    text = _constraint_text(c)
    return f"{text} (preferred)" if c.soft else text


def _constraint_text(c: pb.Constraint) -> str:
    match c.op:
        case "EXISTS":
            return _code(c.key)
        case "NOT_EXISTS":
            return _code(f"!{c.key}")
        case "IN" | "NOT_IN":
            listed = ", ".join(str(get_attr(v)) for v in c.values)
            return _code(f"{c.key} {'in' if c.op == 'IN' else 'not in'} {listed}")
        case op:
            return _code(f"{c.key} {_OPS.get(op, op)} {get_attr(c.value)}")


def job_request_markdown(req: pb.JobRequest) -> str:
    """The job as submitted: what runs, where it may run, how failures are handled."""
    argv = list(req.entrypoint.command.argv)
    what = _code(shlex.join(argv)) if argv else "a Python callable"
    per_task = [f"{req.resources.cpu_millis / 1000:g} cpu", _memory(req.resources.memory_bytes)]
    if req.resources.gpus:
        per_task.append(f"{req.resources.gpus} gpu")
    if req.tpu_variant:
        per_task.append(f"TPU {req.tpu_variant}")
    rows = [
        ("Job", f"{_plain(req.name)} ({_code(req.job_id)})" if req.job_id else _plain(req.name)),
        ("User", _plain(req.user) or "—"),
        ("Runs", what),
        ("Tasks", f"{req.replicas} x {', '.join(per_task)}"),
    ]
    if req.constraints:
        rows.append(("Constraints", ", ".join(_constraint(c) for c in req.constraints)))
    if req.coschedule_group_by:
        if req.coschedule_num_groups > 1:
            shared = f"split evenly over {req.coschedule_num_groups} slices, each on one"
            rows.append(("Coscheduled", f"{shared} {_code(req.coschedule_group_by)}"))
        else:
            rows.append(("Coscheduled", f"all tasks share one {_code(req.coschedule_group_by)}"))
    if req.image:
        rows.append(("Image", _code(req.image)))
    rows.append((
        "Retries",
        f"{req.max_task_failures} task failures allowed; per task {req.max_retries_failure} retries "
        f"after failure, {req.max_retries_preemption} after preemption",
    ))  # fmt: skip
    if req.scheduling_timeout_seconds:
        rows.append(("Scheduling timeout", f"{req.scheduling_timeout_seconds:g} s"))
    if req.after:
        rows.append(("After", f"{', '.join(_code(j) for j in req.after)} ({req.after_rule or 'succeeded'})"))
    if req.max_concurrent:
        rows.append(("Max concurrent", f"{req.max_concurrent} tasks placed at a time"))
    if req.env:
        rows.append(("Environment", ", ".join(_code(k) for k in sorted(req.env))))
    return "\n".join(["| | |", "|---|---|", *(f"| **{k}** | {v} |" for k, v in rows)])


def job_status_markdown(status: pb.JobStatus) -> str:
    """The job now: its state, how many tasks are in each state, and why it failed or waits."""
    counts = ", ".join(f"{n} {state.lower()}" for state, n in sorted(status.task_state_counts.items()) if n)
    lines = [f"**{status.state or 'PENDING'}** — {status.num_tasks} task{'s' if status.num_tasks != 1 else ''}"
             + (f": {counts}" if counts else "")]
    if status.error:
        lines.append(f"\n**Error:** {_plain(status.error)}")
    failed = [t for t in status.tasks if t.error]
    if failed:
        lines.append("\n| Task | State | Attempt | Error |\n|---|---|---|---|")
        lines.extend(f"| {t.task_index} | {t.state} | {t.attempt} | {_plain(t.error)} |" for t in failed[:10])
        if len(failed) > 10:
            lines.append(f"\n…and {len(failed) - 10} more tasks with errors")
    if status.pending_reason:
        lines.append(f"\n**Waiting:** {_plain(status.pending_reason)}")
    return "\n".join(lines)
