"""IN / NOT_IN constraints and soft constraints (preferences): values, evaluation and placement."""

from __future__ import annotations

import pytest

from scheduler import Constraint, Op, PendingJob, Resources, WorkerSnapshot, evaluate, find_assignments
from scheduler.attributes import describe, split_soft, validate_constraints
from scheduler.index import ClusterIndex
from scheduler.reservations import Reservation
from tests.scheduler.sched_helpers import GIB, job, placed, tpu_slice, worker


def soft(key: str, op: str, value: object = None) -> Constraint:
    return Constraint(key, op, value, soft=True)  # type: ignore[arg-type]


def preferring(job_id: str, tasks: int = 1, *prefs: Constraint, **options: object) -> PendingJob:
    """A plain job with the given preferences (soft constraints), as the boundary splits them."""
    hard, preferred = split_soft((*options.pop("constraints", ()), *prefs))  # type: ignore[misc]
    base = job(job_id, tasks, constraints=hard, **options)
    return PendingJob(**{**{f: getattr(base, f) for f in base.__slots__}, "preferences": preferred})  # type: ignore[arg-type,attr-defined]


# -- values ----------------------------------------------------------------------------------------


def test_in_takes_a_list_and_keeps_a_tuple_without_repeats() -> None:
    """IN / NOT_IN normalize their list to a tuple in the order given, repeats dropped (1 and 1.0 are one)."""
    assert ("a", "b") == Constraint("zone", "IN", ["a", "b", "a"]).value
    assert (1, 2.5) == Constraint("n", "NOT_IN", (1, 2.5, 1.0)).value
    assert ("a", "b") == Constraint("zone", "IN", {"b", "a"}).value  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("zone", "IN", "a"), "needs a list of values"),
        (("zone", "IN", []), "at least one value"),
        (("zone", "IN", None), "needs a value"),
        (("zone", "NOT_IN", ["a", 1]), "'zone' must all be of one type, got numbers and strings"),
        (("ssd", "IN", [True, 1]), "'ssd' must all be of one type, got booleans and numbers"),
        (("zone", "IN", [["a"]]), "values for 'zone' must be str, int, float or bool"),
        (("zone", "EQ", ["a", "b"]), "needs op IN or NOT_IN"),
    ],
)
def test_bad_lists_fail_at_construction_naming_the_field(args: tuple[object, ...], message: str) -> None:
    """A malformed IN / NOT_IN (or a list given to a scalar op) is a ValueError that names the key."""
    with pytest.raises(ValueError, match=message):
        Constraint(*args)  # type: ignore[arg-type]


def test_soft_is_allowed_for_every_op_and_must_be_a_bool() -> None:
    """Any operator may be soft; soft itself must be True or False."""
    for op in Op:
        value = None if op in (Op.EXISTS, Op.NOT_EXISTS) else (["a"] if op in (Op.IN, Op.NOT_IN) else 1)
        assert Constraint("k", op, value, soft=True).soft is True  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="soft for 'k' must be True or False"):
        Constraint("k", "EXISTS", soft="yes")  # type: ignore[arg-type]


def test_submission_check_ignores_soft_contradictions_and_catches_hard_ones() -> None:
    """Preferences may contradict (they only rank); hard IN and EQ with nothing in common are rejected."""
    validate_constraints([Constraint("zone", "EQ", "a"), soft("zone", "EQ", "b"), soft("zone", "NOT_EXISTS")])
    with pytest.raises(ValueError, match="'zone' contradict"):
        validate_constraints([Constraint("zone", "EQ", "a"), Constraint("zone", "IN", ["b", "c"])])
    with pytest.raises(ValueError, match="'zone' contradict"):
        validate_constraints([Constraint("zone", "IN", ["a"]), Constraint("zone", "IN", ["b"])])
    with pytest.raises(ValueError, match="must not be NaN"):
        validate_constraints([Constraint("n", "IN", [1.0, float("nan")])])


# -- evaluation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("constraint", "attributes", "expected"),
    [
        (Constraint("zone", "IN", ["a", "b"]), {"zone": "b"}, True),
        (Constraint("zone", "IN", ["a", "b"]), {"zone": "c"}, False),
        (Constraint("zone", "IN", ["a", "b"]), {}, False),
        (Constraint("zone", "NOT_IN", ["a", "b"]), {"zone": "c"}, True),
        (Constraint("zone", "NOT_IN", ["a", "b"]), {"zone": "a"}, False),
        (Constraint("zone", "NOT_IN", ["a", "b"]), {}, False),  # like NE: a missing attribute fails
        (Constraint("n", "IN", [1, 2]), {"n": 2.0}, True),
        (Constraint("n", "IN", [1, 2]), {"n": True}, False),  # booleans are not numbers
        (Constraint("ssd", "IN", [True]), {"ssd": 1}, False),
        (Constraint("n", "NOT_IN", [1]), {"n": "1"}, True),
    ],
)
def test_in_and_not_in(constraint: Constraint, attributes: dict[str, object], expected: bool) -> None:
    """IN holds when the attribute EQ one value; NOT_IN when it is present and EQ none."""
    assert expected == evaluate(constraint, attributes)  # type: ignore[arg-type]


def test_describe_writes_the_cli_syntax() -> None:
    """A set constraint reads as the CLI writes it."""
    assert "zone in a,b" == describe(Constraint("zone", "IN", ["a", "b"]))
    assert "ssd notin true" == describe(Constraint("ssd", "NOT_IN", [True]))


@pytest.mark.parametrize("key", ["zone", "hostname"])
def test_index_answers_in_from_posting_lists(key: str) -> None:
    """IN / NOT_IN through the class cache (zone) and the per-worker index (hostname, a unique key)."""
    workers = [worker(f"w{i}", **{key: v}) for i, v in enumerate(["a", "b", "c", "a"])] + [worker("bare")]
    index = ClusterIndex.build(workers)
    assert {0, 1, 3} == set(index.matching_workers([Constraint(key, "IN", ["a", "b", "zz"])]))
    assert {2} == set(index.matching_workers([Constraint(key, "NOT_IN", ["a", "b"])]))


# -- placement -------------------------------------------------------------------------------------


def test_soft_constraint_picks_a_matching_worker() -> None:
    """Best fit would take the tighter worker in zone a; the preference for zone b wins."""
    workers = [worker("wa", cpu=2, zone="a"), worker("wb", cpu=8, zone="b")]
    result = find_assignments(workers, [preferring("j", 1, soft("zone", "EQ", "b"))])
    assert {0: "wb"} == placed(result, "j")


def test_soft_constraint_falls_back_when_no_match_has_room() -> None:
    """Tasks fill the preferred workers, then run elsewhere; a job no worker prefers still runs whole."""
    workers = [worker("wa", cpu=4, zone="a"), worker("wb", cpu=2, zone="b")]
    result = find_assignments(
        workers,
        [preferring("j", 4, soft("zone", "EQ", "b")), preferring("k", 1, soft("zone", "EQ", "nowhere"))],
    )
    assert ["wb", "wb", "wa", "wa"] == [placed(result, "j")[i] for i in range(4)]
    assert {0: "wa"} == placed(result, "k")
    assert {} == dict(result.pending_reasons)


def test_earlier_preferences_weigh_more() -> None:
    """With two preferences and no worker meeting both, the one meeting the first is taken."""
    workers = [
        worker("second-only", cpu=1, ssd=True, zone="x"),
        worker("first-only", cpu=8, zone="a", ssd=False),
        worker("neither", cpu=1, zone="x"),
    ]
    result = find_assignments(workers, [preferring("j", 1, soft("zone", "IN", ["a"]), soft("ssd", "EQ", True))])
    assert {0: "first-only"} == placed(result, "j")


def test_pending_reason_never_names_a_soft_constraint() -> None:
    """A job that does not fit is explained by its hard constraints and capacity only."""
    workers = [worker("w", cpu=1, zone="a")]
    wanted = preferring("j", 1, soft("zone", "EQ", "b"), constraints=(Constraint("zone", "IN", ["a"]),), cpu=4)
    reason = find_assignments(workers, [wanted]).pending_reasons["j"]
    assert "0/1 workers: 1 have < 4 free cpu" == reason


def test_gang_prefers_a_group_whose_workers_match() -> None:
    """Two free slices: the gang takes the one in the zone it prefers, not the first in best-fit order."""
    first = [WorkerSnapshot(w.worker_id, w.free, {**w.attributes, "zone": "a"}) for w in tpu_slice("s1", 4)]
    second = [WorkerSnapshot(w.worker_id, w.free, {**w.attributes, "zone": "b"}) for w in tpu_slice("s2", 4)]
    base = job("g", 4, cpu=8, tpus=4, group_by="tpu-name")
    for zone, expected in (("b", "s2"), ("a", "s1"), ("z", "s1")):
        gang = PendingJob(base.job_id, base.task_indices, base.request, group_by="tpu-name",
                          preferences=(soft("zone", "EQ", zone),))  # fmt: skip
        result = find_assignments(first + second, [gang])
        assert {f"{expected}-w{i}" for i in range(4)} == set(placed(result, "g").values())


def test_multislice_gang_prefers_matching_groups() -> None:
    """A two-slice gang takes the two slices in the zones it prefers."""
    fleet = []
    for name, zone in (("s1", "a"), ("s2", "b"), ("s3", "c")):
        fleet += [WorkerSnapshot(w.worker_id, w.free, {**w.attributes, "zone": zone}) for w in tpu_slice(name, 2)]
    gang = PendingJob("g", tuple(range(4)), Resources(8000, GIB, 0, 4), group_by="tpu-name", num_groups=2,
                      preferences=(soft("zone", "IN", ["b", "c"]),))  # fmt: skip
    result = find_assignments(fleet, [gang])
    assert {"s2", "s3"} == {w.split("-")[0] for w in placed(result, "g").values()}


def test_reservation_tree_job_prefers_matching_reserved_workers() -> None:
    """Inside a reservation a child job takes the reserved worker it prefers."""
    workers = [worker("wa", cpu=4, zone="a"), worker("wb", cpu=4, zone="b")]
    entry = Resources(4000, GIB)
    reservation = Reservation("rsv-root", "root", (entry, entry))
    child = preferring("root/child", 1, soft("zone", "EQ", "b"))
    result = find_assignments(workers, [child], reservations=[reservation])
    assert {0: "wb"} == placed(result, "root/child")


def test_unique_key_preference_bypasses_the_class_cache() -> None:
    """A preference on a host name (a unique key) is answered per worker, not per class."""
    workers = [worker(f"w{i}", cpu=2, pool="cpu", hostname=f"h{i}") for i in range(6)]
    result = find_assignments(workers, [preferring("j", 1, soft("hostname", "IN", ["h4"]))])
    assert {0: "w4"} == placed(result, "j")
