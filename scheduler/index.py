"""The matching index: which workers satisfy a constraint set, without scanning every worker.

Two layers, as in Nomad's computed node classes:

1. **Worker classes.** Workers that share all their *non-unique* attributes
   form one class (a CPU pool of 3,000 identical hosts is one class; a fleet
   has tens of classes). A constraint on a non-unique key is evaluated once
   per class, through an `AttributeIndex` whose rows are classes.
2. **Unique attributes** (host names, `tpu-worker-id`, `tpu-name`, group keys,
   or any key with more distinct values than a class cache can use) bypass the
   class cache explicitly: a constraint on such a key is answered by a second
   `AttributeIndex` whose rows are workers.

An `AttributeIndex` keeps posting lists per (key, value) for EQ/NE (IN/NOT_IN
take the union of their values' lists), a set of
holders per key for EXISTS/NOT_EXISTS and a sorted numeric column per key for
the ordering operators (bisect), so one constraint costs a dictionary lookup
or a binary search plus a set build, never a loop over rows.

The index is immutable once built; per-pass capacity lives elsewhere.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from scheduler.attributes import ValueKey, is_number, value_key
from scheduler.types import KIND_OF_TYPE, TAINT_PREFIX, AttrValue, Constraint, Op, WorkerSnapshot, value_kind

# Keys that identify one host (or one group) by design; they would split every
# worker into its own class, so they never enter the class key.
KNOWN_UNIQUE_KEYS = frozenset(
    {
        "tpu-worker-id",
        "tpu-name",
        "hostname",
        "host",
        "worker-id",
        "node-name",
        "instance",
        "ip",
        "internal-ip",
    }
)


class AttributeIndex:
    """Posting lists and sorted numeric columns over a list of attribute maps (rows 0..n-1).

    Results are sets owned by the index: callers must treat them as read-only.
    """

    __slots__ = ("_all", "_has", "_numeric", "_postings")

    def __init__(self, rows: Sequence[Mapping[str, AttrValue]]) -> None:
        has: dict[str, set[int]] = {}
        postings: dict[str, dict[ValueKey, set[int]]] = {}
        numeric: dict[str, list[tuple[int | float, int]]] = {}
        for row, attributes in enumerate(rows):
            for key, value in attributes.items():
                has.setdefault(key, set()).add(row)
                if isinstance(value, float) and math.isnan(value):
                    continue  # NaN equals nothing and orders against nothing
                postings.setdefault(key, {}).setdefault(value_key(value), set()).add(row)
                if is_number(value):
                    numeric.setdefault(key, []).append((value, row))  # type: ignore[arg-type]
        self._all: frozenset[int] = frozenset(range(len(rows)))
        self._has = has
        self._postings = postings
        self._numeric: dict[str, tuple[list[int | float], list[int]]] = {}
        for key, pairs in numeric.items():
            pairs.sort(key=lambda pair: pair[0])
            self._numeric[key] = ([value for value, _ in pairs], [row for _, row in pairs])

    def keys(self) -> set[str]:
        """Every attribute key present on at least one row."""
        return set(self._has)

    @property
    def rows(self) -> frozenset[int]:
        """Every row of the index."""
        return self._all

    def match(self, constraint: Constraint) -> Set[int]:
        """Return the rows on which `constraint` holds (same semantics as attributes.evaluate)."""
        key, op, want = constraint.key, constraint.op, constraint.value
        holders = self._has.get(key, set())
        match op:
            case Op.EXISTS:
                return holders
            case Op.NOT_EXISTS:
                return self._all - holders
        if want is None:
            return set()
        if isinstance(want, (tuple, list)):  # IN / NOT_IN: the union of the values' posting lists
            postings = self._postings.get(key, {})
            lists = [found for v in want if v == v and (found := postings.get(value_key(v))) is not None]
            union: Set[int] = lists[0] if len(lists) == 1 else set().union(*lists)
            return union if op == Op.IN else holders - union
        if op in (Op.EQ, Op.NE):
            equal = set() if want != want else self._postings.get(key, {}).get(value_key(want), set())
            return equal if op == Op.EQ else holders - equal
        if not is_number(want) or key not in self._numeric:
            return set()
        values, owners = self._numeric[key]
        match op:
            case Op.GT:
                return set(owners[bisect_right(values, want) :])
            case Op.GE:
                return set(owners[bisect_left(values, want) :])
            case Op.LT:
                return set(owners[: bisect_left(values, want)])
            case _:  # Op.LE
                return set(owners[: bisect_right(values, want)])

    def match_all(self, constraints: Iterable[Constraint]) -> Set[int]:
        """Return the rows on which every constraint holds (all rows for no constraints)."""
        result: Set[int] | None = None
        for constraint in constraints:
            matched = self.match(constraint)
            result = matched if result is None else result & matched
            if not result:
                return frozenset()
        return self._all if result is None else result


def unique_keys(workers: Sequence[WorkerSnapshot], extra: Iterable[str] = ()) -> frozenset[str]:
    """Choose the attribute keys that bypass the class cache.

    Known identity keys, the caller's group keys and any key with more distinct
    values than ~2·sqrt(workers) (a class per value would defeat the cache).
    """
    distinct: defaultdict[str, set[ValueKey]] = defaultdict(set)
    kind_of = KIND_OF_TYPE.get  # `value_key`, written out: this loop sees every attribute of every worker
    for worker in workers:
        for key, value in worker.attributes.items():
            if key not in KNOWN_UNIQUE_KEYS:
                distinct[key].add((kind_of(value.__class__) or value_kind(value), value))
    limit = 2 * math.isqrt(max(1, len(workers))) + 8
    crowded = {key for key, values in distinct.items() if len(values) > limit}
    return frozenset(KNOWN_UNIQUE_KEYS | set(extra) | crowded)


@dataclass(frozen=True, slots=True)
class ClusterIndex:
    """Worker classes plus the two attribute indexes; see the module docstring."""

    workers: Sequence[WorkerSnapshot]
    unique: frozenset[str]
    class_of: list[int]  # worker row -> class id
    class_members: list[list[int]]  # class id -> worker rows, in input order
    class_index: AttributeIndex  # rows are classes (non-unique attributes only)
    worker_index: AttributeIndex  # rows are workers (unique attributes only)
    taint_keys: frozenset[str]

    @classmethod
    def build(cls, workers: Sequence[WorkerSnapshot], extra_unique: Iterable[str] = ()) -> ClusterIndex:
        """Index a snapshot: one pass to classify workers, one per layer to build postings."""
        unique = unique_keys(workers, extra_unique)
        classes: dict[frozenset[tuple[str, type, AttrValue]], int] = {}
        class_of: list[int] = []
        members: list[list[int]] = []
        class_rows: list[dict[str, AttrValue]] = []
        unique_rows: list[dict[str, AttrValue]] = []
        for row, worker in enumerate(workers):
            attributes = worker.attributes
            common = {k: v for k, v in attributes.items() if k not in unique}
            # The value's type is part of the class key: {"x": True} and {"x": 1}
            # hash alike in Python but must not share a class.
            signature = frozenset((k, v.__class__, v) for k, v in common.items())
            class_id = classes.get(signature)
            if class_id is None:
                class_id = classes[signature] = len(members)
                members.append([])
                class_rows.append(common)
            class_of.append(class_id)
            members[class_id].append(row)
            unique_rows.append(
                {k: v for k, v in attributes.items() if k in unique} if len(common) != len(attributes) else {}
            )
        class_index = AttributeIndex(class_rows)
        worker_index = AttributeIndex(unique_rows)
        keys = class_index.keys() | worker_index.keys()
        return cls(
            workers=workers,
            unique=unique,
            class_of=class_of,
            class_members=members,
            class_index=class_index,
            worker_index=worker_index,
            taint_keys=frozenset(k for k in keys if k.startswith(TAINT_PREFIX)),
        )

    def matching_workers(self, constraints: Sequence[Constraint]) -> Set[int]:
        """Return the worker rows satisfying every constraint, using classes where allowed."""
        if not constraints:
            return self.worker_index.rows
        return self._combine(
            self.class_index.match_all(c for c in constraints if c.key not in self.unique),
            [c for c in constraints if c.key in self.unique],
        )

    def feasible_mask(self, constraints: Sequence[Constraint]) -> bytearray:
        """Return a 0/1 byte per worker row: 1 when every constraint holds on that worker."""
        mask = bytearray(len(self.workers))
        class_ok = self.class_index.match_all(c for c in constraints if c.key not in self.unique)
        per_worker = [c for c in constraints if c.key in self.unique]
        if per_worker:
            for row in self._combine(class_ok, per_worker):
                mask[row] = 1
            return mask
        for class_id in class_ok:
            for row in self.class_members[class_id]:
                mask[row] = 1
        return mask

    def _combine(self, class_ok: Set[int], per_worker: list[Constraint]) -> Set[int]:
        """Expand feasible classes to workers and intersect with the unique-key constraints."""
        if per_worker:
            matched = self.worker_index.match_all(per_worker)
            class_of = self.class_of
            return {row for row in matched if class_of[row] in class_ok}
        rows: set[int] = set()
        for class_id in class_ok:
            rows.update(self.class_members[class_id])
        return rows

    def count_excluded(self, constraints: Sequence[Constraint]) -> tuple[list[int], Set[int]]:
        """For reasons: how many workers each constraint removes, in order, and who is left.

        Each worker is charged to the first constraint that rejects it, so the
        counts add up to the number of workers excluded.
        """
        if not any(c.key in self.unique for c in constraints):  # class by class, then the survivors' workers
            sizes = self.class_members
            classes: Set[int] = self.class_index.rows
            counts = []
            for constraint in constraints:
                kept = classes & self.class_index.match(constraint)
                counts.append(sum(len(sizes[k]) for k in classes - kept))
                classes = kept
            rows: set[int] = set()
            for class_id in classes:
                rows.update(sizes[class_id])
            return counts, rows
        remaining: Set[int] = self.worker_index.rows
        counts = []
        for constraint in constraints:
            matched = self.matching_workers((constraint,))
            kept = remaining & matched
            counts.append(len(remaining) - len(kept))
            remaining = kept
        return counts, remaining
