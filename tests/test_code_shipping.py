"""Tests for iris.client.code_shipping: the user's own modules travel by value to a worker that lacks them."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import cloudpickle
import pytest

import worker_agent
from iris.client.code_shipping import pickle_callable, unpickle_result, user_modules
from worker_agent.storage import BlobStore
from worker_agent.task_runner import read_task_error, task_runner_argv

REPO_ROOT = Path(worker_agent.__file__).resolve().parents[1]

HELPERS = """
import dataclasses

from .scaling import scale


@dataclasses.dataclass(frozen=True)
class Summary:
    total: int
    label: str


def summarize(values, label):
    return Summary(total=sum(scale(value) for value in values), label=label)


def fail(message):
    raise ValueError(message)
"""

SCALING = """
FACTOR = 10


def scale(value):
    return value * FACTOR
"""


@pytest.fixture
def local_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A freshly written package importable only from this test process (via sys.path)."""
    name = f"mylocal_pkg_{uuid.uuid4().hex[:8]}"
    source_root = tmp_path / "user_src"
    package = source_root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text(textwrap.dedent(HELPERS))
    (package / "scaling.py").write_text(textwrap.dedent(SCALING))
    monkeypatch.syspath_prepend(str(source_root))
    importlib.invalidate_caches()
    yield importlib.import_module(f"{name}.helpers")
    for module_name in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module_name]


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    """A file blob store shared by the test (client) and the worker subprocess."""
    return BlobStore.from_url((tmp_path / "blobs").as_uri())


def _worker_env() -> dict[str, str]:
    """A worker-like environment: Iris importable, the user's source tree not on any path."""
    return {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": str(REPO_ROOT), "LANG": "C.UTF-8"}


def _run_worker(store: BlobStore, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the task runner as a separate process whose cwd and sys.path exclude the user's code."""
    workdir = tmp_path / "worker_cwd"
    workdir.mkdir(exist_ok=True)
    return subprocess.run(
        task_runner_argv(store.url, "job/fn", "job/result"),
        cwd=workdir,
        env=_worker_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_worker_cannot_import_the_local_package(local_package: ModuleType, tmp_path: Path) -> None:
    """Control: the worker environment really lacks the package, so only by-value shipping can work."""
    top = local_package.__name__.split(".")[0]
    probe = subprocess.run(
        [sys.executable, "-c", f"import {top}"],
        cwd=tmp_path,
        env=_worker_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert probe.returncode == 1
    assert f"No module named '{top}'" in probe.stderr


def test_local_package_function_runs_on_a_worker_without_it(
    local_package: ModuleType, store: BlobStore, tmp_path: Path
) -> None:
    """A function from a module the worker cannot import runs there and its result reads back equal."""
    store.put("job/fn", pickle_callable(local_package.summarize, ([1, 2, 3],), {"label": "sum"}))
    completed = _run_worker(store, tmp_path)
    assert completed.returncode == 0, completed.stderr
    result = unpickle_result(store.get("job/result"))
    assert local_package.Summary(total=60, label="sum") == result


SCRIPT = """
import sys

import sib
from sib import add

from iris.client.code_shipping import pickle_callable
from worker_agent.storage import BlobStore


def uses_the_global(x):
    return sib.add(x)


def imports_it_inside(x):
    import sib

    return sib.add(x) * 10


def took_a_function(x):
    return add(x) * 100


store = BlobStore.from_url(sys.argv[1])
for fn in (uses_the_global, imports_it_inside, took_a_function):
    store.put(f"{fn.__name__}/fn", pickle_callable(fn, (1,)))
"""


@pytest.mark.parametrize(("name", "expected"), [("uses_the_global", 2), ("imports_it_inside", 20),
                                                ("took_a_function", 200)])  # fmt: skip
def test_a_scripts_sibling_module_ships_with_its_function(
    store: BlobStore, tmp_path: Path, name: str, expected: int
) -> None:
    """A script next to its own module (`import sib` at its top or inside the function, `from sib import
    add`): the functions run on a worker that has no sib.py (each failed: No module named 'sib')."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "sib.py").write_text("def add(x):\n    return x + 1\n")
    (project / "script.py").write_text(SCRIPT)
    env = {**_worker_env(), "PYTHONPATH": f"{project}{os.pathsep}{REPO_ROOT}"}
    made = subprocess.run([sys.executable, "script.py", store.url], cwd=project, env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert 0 == made.returncode, made.stderr
    store.put("job/fn", store.get(f"{name}/fn"))
    completed = _run_worker(store, tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert expected == unpickle_result(store.get("job/result"))


def test_exception_in_shipped_code_is_reported(
    local_package: ModuleType, store: BlobStore, tmp_path: Path
) -> None:
    """A ValueError in user code exits 1 and the error blob says 'ValueError: ...'."""
    store.put("job/fn", pickle_callable(local_package.fail, ("bad input",)))
    completed = _run_worker(store, tmp_path)
    assert completed.returncode == 1
    assert read_task_error(store, "job/result") == "ValueError: bad input"
    assert "Traceback (most recent call last)" in completed.stderr


def test_by_reference_pickle_fails_with_a_clear_unpickling_error(
    local_package: ModuleType, store: BlobStore, tmp_path: Path
) -> None:
    """Without by-value shipping the worker reports the module it could not import."""
    store.put("job/fn", cloudpickle.dumps((local_package.summarize, ([1],), {"label": "x"})))
    completed = _run_worker(store, tmp_path)
    top = local_package.__name__.split(".")[0]
    assert completed.returncode == 1
    assert (
        f"cannot unpickle the task's function: ModuleNotFoundError: No module named '{top}'"
        == read_task_error(store, "job/result")
    )


def test_corrupt_function_blob_is_reported(store: BlobStore, tmp_path: Path) -> None:
    """A truncated pickle is reported as a function that cannot be unpickled."""
    store.put("job/fn", pickle_callable(divmod, (7, 2))[:-5])
    completed = _run_worker(store, tmp_path)
    error = read_task_error(store, "job/result")
    assert completed.returncode == 1
    assert error is not None
    assert error.startswith("cannot unpickle the task's function: ")


def test_missing_function_blob_is_reported(store: BlobStore, tmp_path: Path) -> None:
    """A function blob that was never stored is reported as missing."""
    completed = _run_worker(store, tmp_path)
    error = read_task_error(store, "job/result")
    assert completed.returncode == 1
    assert error is not None
    assert error.startswith("task function blob is missing: ")


def test_registrations_are_undone_after_pickling(local_package: ModuleType) -> None:
    """pickle_callable leaves cloudpickle's by-value registry as it found it."""
    before = set(cloudpickle.list_registry_pickle_by_value())
    pickle_callable(local_package.summarize, ([1],), {"label": "x"})
    assert before == set(cloudpickle.list_registry_pickle_by_value())


def test_user_registration_is_kept(local_package: ModuleType) -> None:
    """A package the user registered themselves stays registered after pickle_callable."""
    top = sys.modules[local_package.__name__.split(".")[0]]
    cloudpickle.register_pickle_by_value(top)
    try:
        pickle_callable(local_package.summarize, ([1],), {"label": "x"})
        assert top.__name__ in cloudpickle.list_registry_pickle_by_value()
    finally:
        cloudpickle.unregister_pickle_by_value(top)


def test_user_modules_selects_only_the_users_packages(local_package: ModuleType) -> None:
    """Local packages (from fn or argument classes) ship; stdlib, installed and Iris packages do not."""
    top = local_package.__name__.split(".")[0]
    summary = local_package.Summary(total=1, label="x")
    call = (sorted, ([summary], pytest.raises, cloudpickle.dumps, worker_agent), {"key": BlobStore})
    assert [top] == [module.__name__ for module in user_modules(call)]
    assert user_modules((sorted, (), {"x": pytest})) == []


def test_non_callables_are_rejected() -> None:
    """Shipping something that cannot be called fails on the client, not on the worker."""
    with pytest.raises(TypeError, match="must be callable"):
        pickle_callable(42)  # type: ignore[arg-type]
