"""Constraint semantics, submission validation and TPU variant checks."""

from __future__ import annotations

import pytest

from scheduler import Constraint, Op, evaluate, tpu_vm_count, validate_constraints, validate_coscheduled_tpu
from scheduler.attributes import taint_constraints

ATTRS = {"zone": "a", "cores": 8, "ghz": 2.5, "ssd": True}


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        (Constraint("zone", Op.EQ, "a"), True),
        (Constraint("zone", Op.EQ, "b"), False),
        (Constraint("zone", Op.NE, "b"), True),
        (Constraint("zone", Op.NE, "a"), False),
        (Constraint("zone", Op.EXISTS), True),
        (Constraint("rack", Op.EXISTS), False),
        (Constraint("rack", Op.NOT_EXISTS), True),
        (Constraint("zone", Op.NOT_EXISTS), False),
        (Constraint("cores", Op.GT, 4), True),
        (Constraint("cores", Op.GT, 8), False),
        (Constraint("cores", Op.GE, 8), True),
        (Constraint("cores", Op.LT, 8), False),
        (Constraint("cores", Op.LE, 8), True),
        (Constraint("ghz", Op.LT, 3), True),
        (Constraint("cores", Op.EQ, 8.0), True),
        (Constraint("ghz", Op.GE, 2.5), True),
    ],
)
def test_every_operator(constraint: Constraint, expected: bool) -> None:
    """Each operator evaluates as documented on present attributes; ints and floats compare numerically."""
    assert expected == evaluate(constraint, ATTRS)


@pytest.mark.parametrize("op", [Op.EQ, Op.NE, Op.GT, Op.GE, Op.LT, Op.LE])
def test_missing_attribute_fails_value_operators(op: Op) -> None:
    """A missing attribute fails every value operator, NE included."""
    assert evaluate(Constraint("rack", op, 1), ATTRS) is False


def test_bool_is_not_a_number() -> None:
    """Booleans are their own type: True does not EQ 1, 1 does not EQ True, and bools are never ordered."""
    assert evaluate(Constraint("ssd", Op.EQ, 1), ATTRS) is False
    assert evaluate(Constraint("ssd", Op.EQ, True), ATTRS) is True
    assert evaluate(Constraint("flag", Op.EQ, True), {"flag": 1}) is False
    assert evaluate(Constraint("ssd", Op.NE, 1), ATTRS) is True
    assert evaluate(Constraint("ssd", Op.GE, 0), ATTRS) is False


def test_ordering_between_string_and_number_never_matches() -> None:
    """A string attribute never satisfies an ordering constraint, and strings never EQ numbers."""
    assert evaluate(Constraint("zone", Op.GT, 0), ATTRS) is False
    assert evaluate(Constraint("zone", Op.LT, 10**9), ATTRS) is False
    assert evaluate(Constraint("n", Op.EQ, 1), {"n": "1"}) is False


def test_ordering_op_with_string_value_is_rejected_at_construction() -> None:
    """An ordering constraint on a string is a clear error at submission, naming the key."""
    with pytest.raises(ValueError, match="cores"):
        Constraint("cores", Op.GT, "8")


@pytest.mark.parametrize(
    ("constraints", "message"),
    [
        ([{"key": "zone", "op": "GT", "value": "a"}], "constraints\\[0\\]"),
        ([{"key": "zone", "op": "BETWEEN", "value": 1}], "op"),
        ([("zone", "EXISTS"), ("zone", "NOT_EXISTS")], "zone"),
        ([("zone", "EQ", "a"), ("zone", "EQ", "b")], "zone"),
        ([("x", "GE", float("nan"))], "NaN"),
        ([{"key": "", "op": "EXISTS"}], "key"),
    ],
)
def test_validate_constraints_rejects_bad_sets(constraints: list[object], message: str) -> None:
    """validate_constraints raises ValueError naming the offending field or key."""
    with pytest.raises(ValueError, match=message):
        validate_constraints(constraints)


def test_validate_constraints_accepts_good_sets() -> None:
    """A consistent constraint list passes validation."""
    assert (
        validate_constraints(
            [Constraint("zone", Op.EQ, "a"), ("cores", "GE", 4), {"key": "ssd", "op": "EXISTS"}]
        )
        is None
    )


@pytest.mark.parametrize(
    ("variant", "vms"),
    [
        ("v4-8", 1),
        ("v4-16", 2),
        ("v4-32", 4),
        ("v5e-1", 1),
        ("v5e-4", 1),
        ("v5e-8", 1),
        ("v5e-16", 4),
        ("v5e-32", 8),
        ("v5e-64", 16),
        ("v5e-128", 32),
        ("v5e-256", 64),
        ("v5p-8", 1),
        ("v5p-16", 2),
        ("v6e-16", 4),
        ("v5litepod-16", 4),
    ],
)
def test_tpu_vm_count(variant: str, vms: int) -> None:
    """Known variants map to their VM counts."""
    assert vms == tpu_vm_count(variant)


def test_unknown_tpu_variant_names_the_variant() -> None:
    """An unknown variant raises ValueError naming it."""
    with pytest.raises(ValueError, match="v9-3"):
        tpu_vm_count("v9-3")


def test_validate_coscheduled_tpu() -> None:
    """Replicas must equal the topology's VM count; the error names replicas and the expected count."""
    assert validate_coscheduled_tpu("v5e-16", 4) is None
    with pytest.raises(ValueError, match="replicas must be 4"):
        validate_coscheduled_tpu("v5e-16", 8)


@pytest.mark.parametrize("key", ["my key", "zone in", "zone notin", "a=b", "k>1", "!x", " zone", "a\0b"])
def test_a_key_no_worker_can_have_is_refused_at_construction(key: str) -> None:
    """A constraint key follows the config's attribute-key rule: a job that names a key no worker can have fails
    at construction, naming the key, instead of pending forever."""
    with pytest.raises(ValueError, match=r"constraint key must be letters, digits and '_\.:/-'") as raised:
        Constraint(key, Op.EXISTS)
    assert repr(key) in str(raised.value)


@pytest.mark.parametrize("key", ["zone", "taint:preemptible", "tpu-topology", "tpu-worker-id", "a.b/c_d", "_x", "9"])
def test_keys_a_worker_can_have_are_accepted(key: str) -> None:
    """Taint keys and the keys Iris builds itself (tpu-topology, tpu-worker-id) pass the key rule."""
    assert key == Constraint(key, Op.EXISTS).key


def test_a_stored_constraint_keeps_a_key_from_before_the_rule() -> None:
    """A job stored before keys were checked, or a worker's hand-made taint, still builds (matching no worker):
    it must not stop the scheduling pass. Everything else is still checked."""
    stored = Constraint.stored("zone in", "EXISTS")
    assert ("zone in", Op.EXISTS) == (stored.key, stored.op)
    assert evaluate(stored, {"zone": "a"}) is False
    assert Constraint("zone", Op.EQ, "a") == Constraint.stored("zone", "EQ", "a")
    with pytest.raises(ValueError, match="needs a number"):
        Constraint.stored("zone in", "GT", "a")


def test_a_worker_taint_outside_the_key_rule_still_repels_jobs() -> None:
    """A taint key a worker was started with by hand (not through the config) still yields its NOT_EXISTS."""
    assert (Constraint.stored("taint:a b", Op.NOT_EXISTS),) == taint_constraints((), (), ["taint:a b"])


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, [1, 10**20]])
def test_an_integer_value_too_big_for_the_wire_is_refused_at_construction(value: object) -> None:
    """Constraint values travel as int64: a bigger integer is refused naming the key, not by protobuf at submit."""
    op = Op.IN if isinstance(value, list) else Op.GE
    expected = r"'n': an integer must be between -9223372036854775808 and 9223372036854775807"
    with pytest.raises(ValueError, match=expected):
        Constraint("n", op, value)  # type: ignore[arg-type]
