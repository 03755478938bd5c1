"""Job control at submission: dependencies (`after=`), throttled arrays (`max_concurrent=`), `if_exists=`.

The options are checked here, before anything is started (a ValueError naming the field); what needs
Temporal (that every job named in `after` exists, what `if_exists` finds) is done by the client with
`check_dependencies` and `iris.client.idempotent`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from activities.proto import cluster_pb2 as pb

if TYPE_CHECKING:  # the SDK is imported where Temporal is asked: checking the options (`iris run`) needs none of it
    from temporalio.client import Client

MAX_DEPENDENCIES = 100
"""Jobs one job may wait for: each is one waiting activity of the job's workflow (Temporal allows 2,000)."""


class AfterRule(StrEnum):  # the values of workflows.jobs.job_dependencies.AFTER_RULES
    """What a dependency's end must be for the dependent job to run."""

    SUCCEEDED = "succeeded"  # only SUCCEEDED
    ENDED = "ended"  # any end state


class IfExists(StrEnum):
    """What a submit with a `name` does when a job of that name exists."""

    NEW = "new"  # always submit
    REUSE = "reuse"  # the newest job of the name that has not ended badly, if there is one
    FAIL = "fail"  # ValueError if one is running or pending


def parse_after(after: Any) -> list[str]:
    """The job ids of `after=` (a list of ids or Job handles), or a ValueError naming `after`."""
    if after is None:
        return []
    if isinstance(after, (str, bytes)) or not isinstance(after, Sequence):
        raise ValueError(f"after must be a list of job ids, got {after!r}")
    out: list[str] = []
    for i, item in enumerate(after):
        job_id = getattr(item, "job_id", item)  # a Job handle stands for its id
        if not isinstance(job_id, str) or not job_id or any(ch in job_id for ch in "\0\n\r"):
            raise ValueError(f"after[{i}] must be a job id, got {item!r}")
        if job_id not in out:
            out.append(job_id)
    if len(out) > MAX_DEPENDENCIES:
        raise ValueError(f"after must name at most {MAX_DEPENDENCIES} jobs, got {len(out)}")
    return out


def parse_after_rule(rule: Any) -> AfterRule:
    try:
        return AfterRule(rule)
    except ValueError:
        raise ValueError(f"after_rule must be one of {', '.join(AfterRule)}, got {rule!r}") from None


def parse_if_exists(value: Any, name: str | None) -> IfExists:
    try:
        mode = IfExists(value)
    except ValueError:
        raise ValueError(f"if_exists must be one of {', '.join(IfExists)}, got {value!r}") from None
    if mode is not IfExists.NEW and name is None:
        raise ValueError(f"if_exists={mode.value!r} needs a name: the job it looks for is the one of that name")
    return mode


def parse_max_concurrent(value: Any, coscheduled: bool) -> int:
    """The cap (0 = none); a gang cannot have one: it is placed all at once or not at all."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_concurrent must be an integer >= 1, got {value!r}")
    if coscheduled:
        raise ValueError("max_concurrent cannot be used with coscheduling: a gang's tasks are placed all at once")
    return value


def add_job_control(req: pb.JobRequest, after: Any, after_rule: Any, max_concurrent: Any) -> None:
    """Validate the job-control options and write them into `req`."""
    ids = parse_after(after)
    rule = parse_after_rule(after_rule)
    if not ids and rule.value != "succeeded":  # the default rule alone is no option given
        raise ValueError(f"after_rule: {rule.value!r} given without after (the jobs it is a rule for)")
    req.after.extend(ids)
    if ids:
        req.after_rule = rule.value
    req.max_concurrent = parse_max_concurrent(max_concurrent, bool(req.coschedule_group_by))


def start_memo(req: pb.JobRequest) -> dict[str, Any]:
    """The memo a new job starts with: a job with dependencies says at once what it waits for."""
    from workflows.jobs.job_dependencies import waiting_reason  # workflow code, the SDK with it: only to submit
    from workflows.visibility import initial_job_view

    view = initial_job_view(req)
    if req.after:
        view = replace(view, pending_reason=waiting_reason(list(req.after), req.after_rule))
    return view.to_memo()


async def check_dependencies(temporal: Client, ids: Sequence[str]) -> None:
    """ValueError naming the first id in `ids` that is not a job (nothing is started then)."""
    from iris.client.job_lookup import describe_job

    for i, job_id in enumerate(ids):
        try:
            await describe_job(temporal, job_id)
        except KeyError as err:
            raise ValueError(f"after[{i}]: {err.args[0]}") from None
