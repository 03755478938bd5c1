"""CLI of job control: what `iris job status` shows of dependencies and caps, and `iris schedule`."""

from __future__ import annotations

from iris.types import JobStatus


def job_control_lines(s: JobStatus) -> list[str]:
    """Lines `iris job status` prints about the job's dependencies and its cap on tasks placed at once."""
    lines = []
    if s.after:
        lines.append(f"after: {', '.join(s.after)} (after_rule={s.after_rule or 'succeeded'})")
    if s.max_concurrent:
        lines.append(f"max_concurrent: {s.max_concurrent} tasks placed at a time")
    return lines
