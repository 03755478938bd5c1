"""An announcement's deliveries, column by column: what the scheduler hands `deliver_assignments`.

The scheduler tells each task of a pass where it runs (the `assigned` signal, workflows.messages.Assigned),
2,000 to an activity. As a list of `Delivery`, each assignment carried the name of every field with its value:
a batch of 2,000 was 418 KB of JSON and took ~10 ms of the scheduler's workflow task to encode (of ~50 ms). As
columns the names go once: 156 KB, encoded in ~3.5 ms and decoded in ~4 ms instead of ~7 (docs/performance.md).
The activity sends each task the same signal as before.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from activities.contracts import ASSIGNED, Delivery
from activities.contracts.dataclass_json import to_plain_column


@dataclass
class AssignmentBatch:
    """Deliveries in their order: the `assigned` ones as columns, any other (a task whose scheduling timeout
    passed is told `unschedulable` beside the assignments) whole, with its place among them."""

    workflow_ids: list[str]  # the assignments' task workflows, in order
    fields: list[str]  # the assignment's fields, by name
    columns: list[list[Any]]  # by position with fields: that field of each assignment, by position with workflow_ids
    others: list[Delivery] = field(default_factory=list)  # deliveries of another signal
    other_at: list[int] = field(default_factory=list)  # by position with others: its place among all the deliveries

    def __len__(self) -> int:
        return len(self.workflow_ids) + len(self.others)

    @classmethod
    def of(cls, deliveries: Sequence[Delivery]) -> AssignmentBatch:
        """The batch of `deliveries`, whose `assigned` arguments are dataclasses of one type.
        ValueError if they are not."""
        batch = cls([], [], [])
        args: list[Any] = []
        for at, delivery in enumerate(deliveries):
            if delivery.signal == ASSIGNED:
                batch.workflow_ids.append(delivery.workflow_id)
                args.append(delivery.arg)
            else:
                batch.others.append(delivery)
                batch.other_at.append(at)
        if args:
            kinds = {type(arg) for arg in args}
            kind = next(iter(kinds))
            if len(kinds) > 1 or not dataclasses.is_dataclass(kind):
                raise ValueError(f"AssignmentBatch: assignments of {sorted(k.__name__ for k in kinds)}: one dataclass")
            batch.fields = [f.name for f in dataclasses.fields(kind)]
            batch.columns = [to_plain_column([getattr(arg, name) for arg in args]) for name in batch.fields]
        return batch

    def deliveries(self) -> list[Delivery]:
        """The deliveries again, in their order, each assignment's argument as the JSON of its dataclass (what a
        list of `Delivery` gave the activity). ValueError if the columns do not agree."""
        self._check()
        rows = zip(*self.columns, strict=True) if self.columns else ((),) * len(self.workflow_ids)
        out = [
            Delivery(workflow_id, ASSIGNED, dict(zip(self.fields, row, strict=True)))
            for workflow_id, row in zip(self.workflow_ids, rows, strict=True)
        ]
        for at, other in zip(self.other_at, self.others, strict=True):  # in ascending order: each lands at its place
            out.insert(at, other)
        return out

    def _check(self) -> None:
        """ValueError naming the columns that do not agree (a batch from a broken sender)."""
        count = len(self.workflow_ids)
        if len(self.columns) != len(self.fields) or any(len(column) != count for column in self.columns):
            raise ValueError(f"AssignmentBatch: {len(self.fields)} fields, {len(self.columns)} columns of "
                             f"{sorted({len(c) for c in self.columns})} values: one column per field, one value "
                             f"per workflow id ({count})")  # fmt: skip
        if len(self.other_at) != len(self.others):
            raise ValueError(f"AssignmentBatch: {len(self.others)} others, {len(self.other_at)} other_at")
        places = self.other_at
        ascending = all(a < b for a, b in itertools.pairwise(places))
        if not ascending or (places and not 0 <= places[0] <= places[-1] < len(self)):
            raise ValueError(f"AssignmentBatch: other_at {places} must ascend within the {len(self)} deliveries")
