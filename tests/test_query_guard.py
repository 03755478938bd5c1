"""The query guard's picture of a workflow made of parts that share one core (iris/controller/query_guard.py)."""

from __future__ import annotations

from typing import Any

from iris.controller.query_guard import fingerprint


class _Core:
    def __init__(self) -> None:
        self.snapshot: bytes | None = None
        self.pending: dict[str, list[int]] = {"j": [0, 1]}


class _Part:
    def __init__(self, core: _Core) -> None:
        self.core = core
        self.snapshot: bytes | None = None  # the same name as the core's cache, but not a cache


class _Workflow:
    QUERY_CACHES = ("core.snapshot",)

    def __init__(self) -> None:
        self.core = _Core()
        self.queue = _Part(self.core)
        self.registry = _Part(self.core)


def _picture(w: _Workflow) -> Any:
    return fingerprint(w, frozenset(w.QUERY_CACHES))


def test_a_change_in_the_shared_core_is_seen_and_the_listed_cache_is_not() -> None:
    w = _Workflow()
    before = _picture(w)
    w.core.snapshot = b"encoded by a query"  # the one attribute a query may set
    assert before == _picture(w)
    w.core.pending["j"].append(2)  # reached through every part: any of them changed it
    assert before != _picture(w)


def test_a_cache_is_named_by_its_path_not_by_its_name() -> None:
    """`core.snapshot` is left out; a part's own `snapshot` is state like any other."""
    w = _Workflow()
    before = _picture(w)
    w.registry.snapshot = b"x"
    assert before != _picture(w)


def test_the_shared_core_is_pictured_once() -> None:
    """Walked where first met, then named by reference: three holders of one core cost one walk of it."""
    picture = str(_picture(_Workflow()))
    assert 1 == picture.count("'_Core'")
    assert 2 == picture.count("<pictured>")


def test_a_cache_is_left_out_wherever_the_walk_meets_its_holder() -> None:
    """A part whose name sorts before `core` reaches the core first (the walk goes by name); `core.snapshot`
    is still the listed cache, and the rest of the core is still state."""
    w = _Workflow()
    w.closing = _Part(w.core)  # type: ignore[attr-defined]
    before = _picture(w)
    w.core.snapshot = b"encoded by a query"
    assert before == _picture(w)
    w.core.pending["j"].append(2)
    assert before != _picture(w)
