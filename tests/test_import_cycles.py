"""No import cycles among the project's modules, and imports that follow the layout (docs/architecture.md).

Why: a cycle works only while the import order happens to suit it, and it hides which module
owns what (the CLI's shared helpers, the bench's session handling). Imports inside functions and
under `if TYPE_CHECKING:` count too: a type-only cycle is the same tangle for a reader.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("scheduler", "workflows", "activities", "worker_agent", "iris")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if not path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                found[module_name(path)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports: `from a import b` counts a.b when b is a module, else a."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return {t for t in targets if t in known and t != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_finder_sees_a_cycle() -> None:
    assert [["a", "b"]] == cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}})


def test_no_import_cycles() -> None:
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert "iris.cli.common" in graph["iris.cli.fleet_commands"]  # the scan sees real imports
    assert [] == cycles(graph)


@functools.cache
def _graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def test_workflows_import_the_contract_not_activity_implementations() -> None:
    """A workflow knows an activity by the contract (names, inputs, results) and the schema, never by its code:
    what replays must not move when an activity's body does."""
    wrong = {
        (name, target)
        for name, targets in _graph().items()
        if name.startswith("workflows")
        for target in targets
        if target.startswith("activities") and not target.startswith(("activities.contracts", "activities.proto"))
        and target != "activities"
    }
    assert set() == wrong


def test_the_scheduler_imports_only_itself() -> None:
    """scheduler/ is the pure core: no Temporal, no other package of the project."""
    assert {"scheduler.scheduling", "scheduler.placement"} <= set(_graph())
    wrong = {
        (name, target)
        for name, targets in _graph().items()
        if name.startswith("scheduler")
        for target in targets
        if not target.startswith("scheduler")
    }
    assert set() == wrong
    temporal = [p for p in (ROOT / "scheduler").rglob("*.py") if "temporalio" in p.read_text()]
    assert [] == temporal


MAX_MODULES_PER_FOLDER = 25


def test_no_folder_of_the_product_is_a_flat_room() -> None:
    """A folder of more than ~25 modules no longer says where a thing is: split it by role (iris/ by client, CLI,
    local cluster...; workflows/ by workflow family). Generated protobuf modules do not count."""
    crowded = {}
    for package in PACKAGES:
        for folder in [ROOT / package, *(p for p in (ROOT / package).rglob("*") if p.is_dir())]:
            names = [p for p in folder.glob("*.py") if not p.name.endswith(("_pb2.py", "_pb2_grpc.py", "__init__.py"))]
            if len(names) > MAX_MODULES_PER_FOLDER:
                crowded[folder.relative_to(ROOT).as_posix()] = len(names)
    assert {} == crowded
    assert {"scheduler", "jobs", "tasks", "fleet", "auth"} <= {p.name for p in (ROOT / "workflows").iterdir()}
