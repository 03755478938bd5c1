"""The runner's light unpickling and result pickling: the same functions and bytes as cloudpickle's, for less."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from worker_agent.shipped_call import CHECKED_CLOUDPICKLE, dump_result, is_plain, load_call
from worker_agent.storage import BlobStore
from worker_agent.task_runner import read_result, read_task_error, task_runner_argv

REPO = Path(__file__).resolve().parents[2]


def test_cloudpickle_is_a_release_the_light_helpers_were_checked_against() -> None:
    """The helpers re-implement what cloudpickle's reducer calls: a release they were not checked against
    (or a pin in pyproject.toml that lets one in) fails here, before a shipped call fails on a worker."""
    installed = ".".join(cloudpickle.__version__.split(".")[:2])
    assert installed in CHECKED_CLOUDPICKLE, f"cloudpickle {cloudpickle.__version__}: check shipped_call against it"
    pin = next(line for line in (REPO / "pyproject.toml").read_text().splitlines() if '"cloudpickle' in line)
    major, minor = CHECKED_CLOUDPICKLE[-1].split(".")
    assert f"<{major}.{int(minor) + 1}" in pin, f"pyproject.toml lets a later cloudpickle in: {pin.strip()}"


def _shapes() -> dict[str, Any]:
    """Functions of every shape cloudpickle ships by value (made here, so they are not importable)."""
    import os.path

    offset = 10

    def with_closure(x: int, *, scale: int = 2) -> int:
        """Doc kept."""
        return (x + offset) * scale

    with_closure.tag = "attribute kept"  # type: ignore[attr-defined]

    def recursive(n: int) -> int:
        return 1 if n <= 1 else n * recursive(n - 1)

    def uses_submodule(name: str) -> str:
        return os.path.join("/base", name)  # noqa: PTH118 - a submodule reached through its package

    def calls_later() -> int:
        return defined_after() + 1

    def defined_after() -> int:
        return 41

    def empty_cell() -> Any:
        return never_set  # type: ignore[has-type]  # its cell stays empty

    if False:
        never_set = None

    def defaults(a: int, b: list[int] = [1, 2]) -> int:  # noqa: B006 - a default shipped as it is
        return a + sum(b)

    return {
        "with_closure": (with_closure, (1,), {"scale": 3}),
        "recursive": (recursive, (5,), {}),
        "uses_submodule": (uses_submodule, ("x",), {}),
        "calls_later": (calls_later, (), {}),
        "empty_cell": (empty_cell, (), {}),
        "defaults": (defaults, (1,), {}),
        "lambda": (lambda *xs: sorted(xs), (3, 1, 2), {}),
    }


def _outcome(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _facts(fn: Any) -> dict[str, Any]:
    """What a user could observe of a function, besides calling it."""
    names = ("__name__", "__qualname__", "__module__", "__doc__", "__defaults__", "__kwdefaults__", "__annotations__")
    facts = {name: getattr(fn, name) for name in names}
    facts["dict"] = dict(fn.__dict__)
    facts["cells"] = len(fn.__closure__ or ())
    return facts


@pytest.mark.parametrize("shape", sorted(_shapes()))
def test_light_loading_rebuilds_the_function_cloudpickle_rebuilds(shape: str) -> None:
    """The same calls, results, errors and attributes as cloudpickle.loads gives for each shape of function."""
    payload = cloudpickle.dumps(_shapes()[shape])
    ours, theirs = load_call(payload), cloudpickle.loads(payload)
    assert _outcome(*theirs) == _outcome(*ours)
    assert _facts(theirs[0]) == _facts(ours[0])
    assert ours[0].__globals__["__builtins__"] is theirs[0].__globals__["__builtins__"]


def test_a_payload_with_a_dynamic_class_still_loads_through_cloudpickle() -> None:
    """Names beyond the function helpers (here a dataclass made at run time) are cloudpickle's own."""

    @dataclasses.dataclass
    class Point:
        x: int
        y: int

        def norm1(self) -> int:
            return abs(self.x) + abs(self.y)

    payload = cloudpickle.dumps((lambda p: p.norm1(), (Point(3, -4),), {}))
    fn, args, _ = load_call(payload)
    assert 7 == fn(*args)
    assert dataclasses.is_dataclass(args[0])


@pytest.mark.parametrize(
    "value",
    [None, True, 3, -(2**80), 1.5, "text", b"bytes", bytearray(b"ba"), (1, "a"), [1, [2, [3]]],
     {"k": {"nested": (1, 2)}, 3: None}, {1, 2}, frozenset({"a"}), ["shared"] * 3],
)  # fmt: skip
def test_a_plain_result_is_pickled_to_cloudpickles_bytes(value: Any) -> None:
    """Plain data is written exactly as cloudpickle.dumps writes it, so the client reads the same thing."""
    assert is_plain(value)
    assert cloudpickle.dumps(value) == dump_result(value)


def test_other_results_go_through_cloudpickle() -> None:
    """A lambda, an instance of a class made at run time, a cyclic list, subclasses of builtins: all round-trip."""

    class Local:
        def __init__(self) -> None:
            self.value = 5

    class Count(int):
        pass

    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    big = list(range(20_000))
    for value in (lambda: 4, Local(), cyclic, Count(2), 1 + 2j, [[x] for x in range(11_000)], big):
        assert cloudpickle.loads(dump_result(value)) is not None
    assert 4 == cloudpickle.loads(dump_result(lambda: 4))()
    assert 5 == cloudpickle.loads(dump_result(Local())).value
    restored = cloudpickle.loads(dump_result(cyclic))
    assert restored[1] is restored
    assert not is_plain(cyclic)
    assert big == cloudpickle.loads(dump_result(big))


def _report_modules() -> Any:
    """A function (made here: shipped by value) that reports which heavy modules its process had loaded."""
    heavy = ("cloudpickle", "typing", "dataclasses", "pathlib", "tempfile", "worker_agent.storage")

    def loaded() -> list[str]:
        import sys

        return [name for name in heavy if name in sys.modules]

    return loaded


def _run_fresh(store: BlobStore, payload: bytes) -> subprocess.CompletedProcess[str]:
    """The runner in a fresh interpreter from the code a container mounts (no site: only what the runner imports)."""
    from worker_agent.task_area import stage_runner_code

    staged = stage_runner_code(store.root.parent / "tasks")
    store.put("job/fn", payload)
    argv = task_runner_argv(store.url, "job/fn", "job/result")
    argv[1:1] = ["-S"]
    env = {"PYTHONPATH": str(staged), "PATH": os.environ.get("PATH", "")}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)


def test_a_fresh_runner_reaches_the_function_without_the_heavy_imports(blob_store: BlobStore) -> None:
    """What a container task pays before its first line: neither cloudpickle, typing nor the storage module."""
    done = _run_fresh(blob_store, cloudpickle.dumps((_report_modules(), (), {})))
    assert 0 == done.returncode, done.stderr
    assert [] == read_result(blob_store, "job/result")


def test_a_fresh_runner_still_runs_what_needs_cloudpickle_and_fails_in_one_line(blob_store: BlobStore) -> None:
    """A dynamic class in the call and in the result works; an exception is still one line, its traceback in the log."""

    class Box:
        def __init__(self, value: int) -> None:
            self.value = value

    def double(box: Box) -> Box:
        return Box(box.value * 2)

    done = _run_fresh(blob_store, cloudpickle.dumps((double, (Box(21),), {})))
    assert 0 == done.returncode, done.stderr
    assert 42 == read_result(blob_store, "job/result").value

    def fail() -> None:
        raise ValueError("bad input\nin two lines")

    done = _run_fresh(blob_store, cloudpickle.dumps((fail, (), {})))
    assert 1 == done.returncode
    assert "ValueError: bad input in two lines" == read_task_error(blob_store, "job/result")
    assert "Traceback (most recent call last)" in done.stderr
    assert "iris task failed: ValueError: bad input in two lines" in done.stderr


def test_the_runner_module_imports_nothing_heavy_at_its_top() -> None:
    """Importing the runner (what `python -m` does before any work) loads none of the costly modules."""
    probe = (
        "import sys; before = set(sys.modules); import worker_agent.task_runner;"
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    env = {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, env=env, check=True)
    added = set(done.stdout.split())
    assert {"worker_agent.task_runner", "worker_agent.blob_files", "worker_agent.shipped_call"} <= added
    costly = {"cloudpickle", "typing", "dataclasses", "pathlib", "contextlib", "re", "tempfile", "hashlib",
              "urllib.parse", "logging", "threading", "worker_agent.storage"}  # fmt: skip
    assert set() == added & costly
