"""The package's import graph has no cycles, counting imports inside functions and under
``TYPE_CHECKING`` (a function-local import is how a cycle usually hides)."""

from __future__ import annotations

import ast
from pathlib import Path

import ovkit

PACKAGE = Path(ovkit.__file__).parent


def module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """module -> the ovkit modules it imports anywhere in its source."""
    mods = module_names()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names if a.name.split(".")[0] == "ovkit"]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    head = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(head + ([base] if base else []))
                if base.split(".")[0] == "ovkit":
                    targets = [
                        f"{base}.{a.name}" if f"{base}.{a.name}" in mods else resolve(base)
                        for a in node.names
                    ]
            graph[mod].update(t for t in targets if t is not None and t != mod)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return found


def test_the_cycle_finder_finds_a_function_local_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_sees_function_local_imports() -> None:
    graph = import_graph()
    # ovkit.graph imports the numpy reference inside Graph.compute only
    assert "ovkit.ops.reference" in graph["ovkit.graph"]
    assert "ovkit.ir" in graph["ovkit.graph"]


def test_no_import_cycles_in_the_package() -> None:
    assert cycles(import_graph()) == []


def test_data_flows_one_way_builder_to_engine_to_ops() -> None:
    """``Graph.compute`` calls the engine; the engine reads the IR and calls the ops (policy,
    feeds, translation); nothing below calls back up (no hook installed by the package)."""
    graph = import_graph()
    assert "ovkit.engine" in graph["ovkit.graph"]
    assert "ovkit.ops.policy" in graph["ovkit.engine.plan"] and "ovkit.ops.feed" in graph["ovkit.engine.plan"]
    below = [
        m for m in graph if m in ("ovkit.ir", "ovkit.dtypes") or m.startswith(("ovkit.ops", "ovkit.engine"))
    ]
    upward = {
        m: sorted(
            t
            for t in graph[m]
            if t == "ovkit.graph" or (t.startswith("ovkit.engine") and not m.startswith("ovkit.engine"))
        )
        for m in below
    }
    assert {m: ts for m, ts in upward.items() if ts} == {}
    assert "ovkit.ir" not in graph["ovkit"]  # the package wires nothing into the IR


def test_no_module_imports_a_private_name_of_another() -> None:
    """A ``_name`` is its module's own business: another module that needs it needs a public name."""
    found = []
    for mod, path in module_names().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ovkit"):
                found += [
                    f"{mod} imports {node.module}.{a.name}" for a in node.names if a.name.startswith("_")
                ]
    assert not found, found


def test_no_function_is_longer_than_150_lines() -> None:
    """A function a reader cannot take in at once is split where its steps are."""
    long = []
    for mod, path in module_names().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.end_lineno is None:
                continue
            if (n := node.end_lineno - node.lineno + 1) > 150:
                long.append(f"{mod}.{node.name}: {n} lines")
    assert not long, long
