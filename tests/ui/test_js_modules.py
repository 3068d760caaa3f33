"""The page's ES modules (static/js/*.js, no bundler) import each other without a cycle.

A cycle works only while no module of it uses another's export as it loads, and makes the
modules hard to read one at a time. When two modules need each other, what both use goes into
a lower module they both import (messages.js, state.js, composer.js), or the call that goes
against the import order is handed over at start-up (as app.js does with `setWidgetHandler`,
and history.js with `setShowMessages` in show_messages.js).

The imports are read from the source: `import … from "…"`, `export … from "…"`, `import "…"`
and `import("…")` with a literal path, absolute (/static/js/x.js) or relative (./x.js).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

JS_DIR = Path(__file__).resolve().parents[2] / "static" / "js"
URL_PREFIX = "/static/js/"

# The module specifier of a static import or re-export (possibly over several lines), a bare
# `import "x"`, or a dynamic import of a literal.
IMPORT = re.compile(
    r"""^\s*(?:import|export)\s+(?:[\w*{}\s,$]+?\s+from\s+)?["']([^"']+)["']"""
    r"""|\bimport\(\s*["']([^"']+)["']\s*\)""",
    re.MULTILINE,
)


def module_name(specifier: str, importer: str) -> str | None:
    """The static/js file an import names (e.g. "turns.js"), or None for anything else (vendor)."""
    if specifier.startswith(URL_PREFIX):
        path = PurePosixPath(specifier[len(URL_PREFIX) :])
    elif specifier.startswith(("./", "../")):
        path = PurePosixPath(importer).parent / specifier
    else:
        return None
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if not parts:
                return None  # above static/js
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of static/js -> the static/js modules it imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(JS_DIR.rglob("*.js")):
        name = path.relative_to(JS_DIR).as_posix()
        source = path.read_text(encoding="utf-8")
        targets = (module_name(a or b, name) for a, b in IMPORT.findall(source))
        graph[name] = {target for target in targets if target is not None}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with a cycle (Tarjan), each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_reader_sees_the_imports() -> None:
    graph = import_graph()
    assert "app.js" in graph
    assert {"state.js", "turns.js", "history.js"} <= graph["app.js"]
    for name, targets in graph.items():
        missing = sorted(target for target in targets if target not in graph)
        assert not missing, f"{name} imports modules that do not exist: {missing}"


def test_the_finder_sees_a_cycle() -> None:
    graph = {"a.js": {"b.js"}, "b.js": {"c.js"}, "c.js": {"a.js"}, "d.js": {"d.js"}, "e.js": {"a.js"}}
    assert cycles(graph) == [["a.js", "b.js", "c.js"], ["d.js"]]
    source = 'import {\n  x,\n  y,\n} from "/static/js/a.js";\nexport { z } from "./b.js";\nimport("./c.js");\nimport hljs from "/static/vendor/highlight.min.js";\n'
    specifiers = [module_name(a or b, "x.js") for a, b in IMPORT.findall(source)]
    assert specifiers == ["a.js", "b.js", "c.js", None]


def test_static_js_has_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert found == [], "import cycles in static/js: " + "; ".join(" <-> ".join(cycle) for cycle in found)
