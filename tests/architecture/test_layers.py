"""The house's shape, held by a test: wings import only the floors below them, no module is part of
an import cycle, and the dependency-free helpers import nothing of the product.

Imports are read with `ast` from the source, every one of them: at the top, inside functions, and
under `TYPE_CHECKING` (a type-only arrow is still an arrow a reader has to follow).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_PRODUCT = {"tests", "bench", "scripts", "testing", "web", "static", "data", "docs", "examples"}

#: Each wing's floor: a module may import its own wing and wings on lower floors only.
FLOORS: dict[str, int] = {
    "foundation": 0,  # cancellation, deadlines, safe text: imports nothing of the product
    "observe": 0,  # traces, metrics and JSON logs (SPEC 16): imports nothing of the product
    "llm": 1,  # the providers' internals
    "providers": 2,  # the provider face
    "bounded": 2,  # untrusted work in limited worker processes (the SQL sandboxes among it)
    "judge": 2,  # the Docker judge
    "storage": 3,
    "config": 0,  # settings: plain values, a leaf (what they build is built where the app is made)
    "learner": 6,
    "tools": 7,
    "commands": 8,
    "mcp_client": 8,  # MCP servers' tools as Tool units (SPEC 14): tools, storage, config below it
    "pipeline": 9,
    "activities": 10,
    "evaluation": 10,  # the protocol evaluation (SPEC 15): the pipeline against a real model, tools in dry-run
    "live": 11,  # events, active turns, the turn runner, per-user limits
    "api": 12,
    "mcp_server": 13,  # /mcp: our tools for MCP hosts, through api's direct tool call
    "serving": 14,
    "cli": 15,
    "app": 16,
}
#: Modules allowed at the repository's root (SPEC 1's layout), each a face of its wing.
ROOT_MODULES = {"app", "providers"}


def product_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if parts[0] in NOT_PRODUCT or parts[0].startswith("."):
            continue
        name = ".".join(parts)[: -len(".py")]
        modules[name.removesuffix(".__init__")] = path
    return modules


def imported_names(module: str, path: Path) -> Iterator[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    modules = product_modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = {resolve(name) for name in imported_names(module, path)}
        graph[module] = {target for target in targets if target and target != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def wing(module: str) -> str:
    return module.split(".")[0]


def test_no_module_is_part_of_an_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_wing_has_a_floor_and_only_the_faces_stay_at_the_root() -> None:
    modules = product_modules()
    assert {wing(module) for module in modules} <= set(FLOORS)
    assert {module for module, path in modules.items() if path.parent == ROOT} == ROOT_MODULES


@pytest.mark.parametrize("importer", sorted(FLOORS))
def test_a_wing_imports_only_lower_floors(importer: str) -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if wing(module) == importer
        for target in targets
        if wing(target) != importer and FLOORS[wing(target)] >= FLOORS[importer]
    )
    assert upward == []


def test_foundation_imports_nothing_of_the_product() -> None:
    graph = import_graph()
    assert {target for module in graph if wing(module) == "foundation" for target in graph[module]} <= {
        module for module in graph if wing(module) == "foundation"
    }
