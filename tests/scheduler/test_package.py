"""The scheduler package's public names load on first use, and each is the one its module defines."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import scheduler

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_is_its_modules_own_object() -> None:
    """A name listed in `__all__` but missing from the lazy table (or pointing at the wrong module) fails here."""
    for name in scheduler.__all__:
        home = scheduler._HOME[name]
        assert getattr(scheduler, name) is getattr(importlib.import_module(home), name), name
    assert sorted(scheduler.__all__) == sorted(scheduler._HOME)


def test_the_typed_imports_name_the_same_homes_as_the_lazy_table() -> None:
    """The package lists its names three times (typed imports for mypy, the lazy table, `__all__` for the
    linters, which each need their own literal form): a name added to one and not the others fails here."""
    tree = ast.parse(Path(scheduler.__file__).read_text())
    typed = {
        alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("scheduler.")
        for alias in node.names
    }
    assert typed == scheduler._HOME


def test_an_unknown_name_is_an_attribute_error() -> None:
    assert not hasattr(scheduler, "no_such_name")


def test_the_value_types_load_without_the_scheduling_pass() -> None:
    """What the client and the agents import (`scheduler.types`) does not load the pass and its policies:
    every `iris` command and task starts ~0.1 s sooner."""
    code = "import sys, scheduler.types; print(sorted(m for m in sys.modules if m.startswith('scheduler')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "'scheduler.types'" in out
    assert "scheduler.scheduling" not in out
    assert "scheduler.preemption" not in out
