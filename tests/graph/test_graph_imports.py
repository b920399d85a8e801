"""graph's own import graph has no cycle: imports between graph/*.py point one way.

Read from the source (AST), so every import counts: module-level, inside functions, and under
`if TYPE_CHECKING:`.
"""
from __future__ import annotations

import ast
from pathlib import Path

GRAPH = Path(__file__).resolve().parents[2] / "graph"


def graph_imports() -> dict[str, set[str]]:
    """module name -> the graph modules it imports."""
    modules = {p.stem for p in GRAPH.glob("*.py")}
    edges: dict[str, set[str]] = {}
    for path in GRAPH.glob("*.py"):
        found: set[str] = set()
        for item in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(item, ast.ImportFrom):
                if item.level:  # relative: `from . import x` / `from .x import y`
                    parts = (item.module or "").split(".")
                    found.update([parts[0]] if item.module else [a.name for a in item.names])
                elif item.module == "graph":
                    found.update(a.name for a in item.names)
                elif item.module and item.module.startswith("graph."):
                    found.add(item.module.split(".")[1])
            elif isinstance(item, ast.Import):
                found.update(a.name.split(".")[1] for a in item.names if a.name.startswith("graph."))
        edges[path.stem] = {m for m in found if m in modules and m != path.stem}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(edges.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return groups


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_graph_modules_import_each_other_in_one_direction_only():
    edges = graph_imports()
    assert {"executor", "run", "node_step"} <= set(edges)
    assert cycles(edges) == []


def test_a_run_never_sees_the_executor_and_a_step_never_sees_the_run():
    edges = graph_imports()
    assert "executor" not in edges["run"] and "executor" not in edges["node_step"]
    assert "run" not in edges["node_step"]
