"""Property-based fuzzing of submission: every request is either rejected with a ValueError naming
the field, or accepted and then handled by the scheduler path (snapshot -> scheduling activity ->
plan) without a crash: placed, timed out, or pending with a reason.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from activities.proto import cluster_pb2 as pb
from activities.proto import compressed
from activities.scheduling import find_assignments_activity
from iris.client.submission import build_request, command_argv
from iris.types import Constraint, CoschedulingConfig, ResourceSpec
from workflows.jobs.job_waves import scheduling_spec
from workflows.scheduler.scheduler_state import PendingEntry, SchedulerState, WorkerEntry
from workflows.scheduler.snapshot_cache import encode_snapshot

FIELDS = (
    "name", "resources", "constraint", "coscheduling", "env", "image", "max_task_failures",
    "max_retries_failure", "max_retries_preemption", "scheduling_timeout", "priority", "tolerations",
    "replicas", "command",
)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True), st.text(max_size=8)
)
weird = st.one_of(scalars, st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers()))
ops = st.one_of(st.sampled_from(["EQ", "NE", "EXISTS", "NOT_EXISTS", "GT", "GE", "LT", "LE"]), st.text(max_size=4))
keys = st.one_of(st.sampled_from(["zone", "tpu-topology", "tpu-name", "taint:maint", "rank"]), st.text(max_size=6))


@st.composite
def submissions(draw: st.DrawFn) -> dict[str, Any]:
    """Raw inputs for one submission, each field valid ~90% of the time and arbitrary otherwise.

    Objects are built inside the test so that their own validation errors count too.
    """

    def field(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any]) -> Any:
        # 7, not 0: Hypothesis favours boundary values, which would corrupt far more than 10%.
        return draw(invalid if draw(st.integers(0, 9)) == 7 else valid)

    constraint = st.tuples(
        st.sampled_from(["zone", "tpu-topology", "rank", "taint:maint"]),
        st.sampled_from(["EQ", "NE", "EXISTS", "NOT_EXISTS", "GE", "LT"]),
        st.one_of(st.sampled_from(["us", "eu", "v5e-16"]), st.integers(0, 5), st.floats(0, 5)),
    ).map(lambda c: (c[0], c[1], None if c[1] in ("EXISTS", "NOT_EXISTS") else c[2]))
    return {
        "name": field(st.text(min_size=1, max_size=30).filter(str.strip), st.one_of(st.integers(), st.just(""))),
        "resources": {
            "cpu": field(st.sampled_from([0.1, 0.5, 1, 2, "500m"]), st.one_of(st.floats(-2, 1e9), st.text(max_size=5),
                                                                        st.just(float("nan")))),
            "memory": field(st.sampled_from(["512m", "2g", "1.5Gi", 2**20]), st.one_of(st.text(max_size=4),
                                                                                     st.integers(-5, -1))),
            "gpus": field(st.integers(0, 1), st.one_of(st.integers(-3, -1), st.booleans())),
            "replicas": field(st.integers(1, 6), st.one_of(st.integers(-2, 0), st.floats(0, 5))),
            "tpu": field(st.none(), st.sampled_from(["v5e-16", "v4-8", "v9-1", ""])),
        },
        "constraints": field(st.lists(constraint, max_size=3), st.lists(st.tuples(keys, ops, weird), max_size=3)),
        "group_by": field(st.sampled_from([None, None, "tpu-name"]), st.just("")),
        "env": field(
            st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,5}", fullmatch=True), st.text(max_size=8), max_size=3),
            st.dictionaries(st.text(max_size=8), st.one_of(st.text(max_size=8), st.integers()), min_size=1, max_size=2),
        ),
        "image": field(st.sampled_from([None, "busybox:1"]), st.sampled_from(["", 3])),
        "max_task_failures": field(st.integers(0, 5), st.integers(-3, -1)),
        "max_retries_failure": field(st.integers(0, 5), st.one_of(st.integers(-3, -1), st.floats(0, 2))),
        "max_retries_preemption": field(st.integers(0, 200), st.integers(-3, -1)),
        "scheduling_timeout": field(
            st.one_of(st.none(), st.floats(0.5, 1e6), st.just(timedelta(seconds=3))),
            st.one_of(st.floats(-5, 0), st.just(float("nan")), st.just(float("inf"))),
        ),
        "command": field(st.lists(st.text(min_size=1, max_size=6).filter(lambda a: "\0" not in a), min_size=1,
                                  max_size=3), st.one_of(st.just([]), st.text(max_size=4))),
    }


def _submit(raw: dict[str, Any]) -> pb.JobRequest:
    """What IrisClient.submit_command does before it starts anything."""
    argv = command_argv(raw["command"])
    req = build_request(
        name=raw["name"],
        resources=ResourceSpec(**raw["resources"]),
        constraints=[Constraint(k, op, v) for k, op, v in raw["constraints"]],
        coscheduling=CoschedulingConfig(raw["group_by"]) if raw["group_by"] is not None else None,
        env=raw["env"],
        image=raw["image"],
        max_task_failures=raw["max_task_failures"],
        max_retries_failure=raw["max_retries_failure"],
        max_retries_preemption=raw["max_retries_preemption"],
        scheduling_timeout=raw["scheduling_timeout"],
    )
    req.entrypoint.command.argv.extend(argv)
    return req


def _fleet() -> dict[str, WorkerEntry]:
    attrs: list[dict[str, Any]] = [
        {"zone": "us", "tpu-topology": "v5e-16", "tpu-name": "s", "tpu-worker-id": i, "rank": 3} for i in range(4)
    ]
    attrs.append({"zone": "eu", "taint:maint": True})
    return {
        f"w{i}": WorkerEntry(f"w{i}", "s", 8000, 2**34, 1, 0, a) for i, a in enumerate(attrs)
    }


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(submissions())
def test_every_submission_is_rejected_naming_a_field_or_scheduled_without_crash(raw: dict[str, Any]) -> None:
    """Any submission either raises ValueError naming its field or flows through the scheduler cleanly."""
    try:
        req = _submit(raw)
    except ValueError as err:
        assert any(field in str(err) for field in FIELDS), f"error names no field: {err}"
        event("rejected")
        return
    event("accepted")
    spec = scheduling_spec(req)
    state = SchedulerState(
        workers=_fleet(),
        pending={"j": PendingEntry("j", spec, dict.fromkeys(range(req.replicas), 0), 0.0)},
    )
    plan = pb.SchedulingPlan.FromString(compressed.decompress(find_assignments_activity(encode_snapshot(state, 1.0))))
    placed = {a.task_index for a in plan.assignments}
    timed_out = {t.task_index for t in plan.timed_out}
    assert placed | timed_out == set(range(req.replicas)) or plan.pending_reasons.get("j")
