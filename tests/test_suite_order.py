"""The suite's scheduling hint stays true to the tree: every file it names to start first exists."""

from __future__ import annotations

from tests.conftest import LONGEST_FIRST, TESTS


def test_the_longest_files_named_to_start_first_exist() -> None:
    """A file renamed or removed would silently drop out of the hint (and the run's tail grow again)."""
    assert [] == [name for name in LONGEST_FIRST if not (TESTS / name).is_file()]
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
