"""The import graph of our own modules (graph/, nodes/, comfy_core/, compat/, web/, main.py), read
from the source without importing anything: no import cycles, and DESIGN.md's layers ("imports
only point down": main.py > web > nodes > graph / comfy_core; compat is imported only by the
hosts, web/ and main.py).

Every import counts: module level, inside functions, under `if TYPE_CHECKING:` (an annotation
import is still a dependency between the two files), relative ones resolved, and
`importlib.import_module("literal")`. `compat/comfy_surface/` holds ComfyUI's module names
(`comfy.*`, `folder_paths`, ...): its files are compat modules under those names.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("graph", "nodes", "comfy_core", "compat", "web")
SURFACE = REPO / "compat" / "comfy_surface"
SURFACE_TOP_LEVEL = frozenset(p.stem for p in SURFACE.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file())


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def layer(self) -> str:
        top = self.name.split(".")[0]
        return "compat" if top in SURFACE_TOP_LEVEL else top


@dataclass(frozen=True)
class Edge:
    source: str
    target: str  # one of our modules, or an outside top-level name (torch, aiohttp, ...)
    line: int


def _module_name(path: Path) -> tuple[str, bool]:
    rel = path.relative_to(REPO)
    if rel.parts[:2] == ("compat", "comfy_surface"):
        rel = rel.relative_to("compat/comfy_surface")
    parts = list(rel.with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


@functools.lru_cache(maxsize=1)
def modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            name, is_package = _module_name(path)
            found[name] = Module(name, path, is_package)
    found["main"] = Module("main", REPO / "main.py", False)
    return found


def _ours(dotted: str) -> str | None:
    """The module of ours that importing `dotted` runs last (its longest known prefix)."""
    known = modules()
    while dotted:
        if dotted in known:
            return dotted
        dotted = dotted.rpartition(".")[0]
    return None


def _imported(module: Module, node: ast.AST) -> list[str]:
    """Absolute dotted names an import statement (or import_module("...") call) reaches."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            parent = ".".join(base + ([node.module] if node.module else []))
        else:
            parent = node.module or ""
        # `from a import b` imports the submodule a.b when there is one, else a name of a.
        return [f"{parent}.{alias.name}" if f"{parent}.{alias.name}" in modules() else parent
                for alias in node.names]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return [node.args[0].value]
    return []


@functools.lru_cache(maxsize=1)
def edges() -> tuple[Edge, ...]:
    out: list[Edge] = []
    for module in modules().values():
        tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
        for node in ast.walk(tree):
            for dotted in _imported(module, node):
                target = _ours(dotted) or dotted.split(".")[0]
                if target != module.name:
                    out.append(Edge(module.name, target, getattr(node, "lineno", 0)))
    return tuple(out)


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    for edge in edges():
        if edge.target in graph:
            graph[edge.source].add(edge.target)
    return graph


def import_cycles() -> list[list[str]]:
    """One cycle (a path `a -> b -> ... -> a`) per strongly connected group of our modules."""
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative (no recursion limit)
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
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return [_cycle_in(group, graph) for group in groups]


def _cycle_in(group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & group):
                if child == start:
                    return paths[node] + [start]
                if child not in paths:
                    paths[child] = paths[node] + [child]
                    following.append(child)
        frontier = following
    return sorted(group)


def _describe(cycles: list[list[str]]) -> str:
    return "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_import_cycles_outside_graph():
    cycles = [c for c in import_cycles() if not all(m.startswith("graph.") for m in c)]
    assert not cycles, f"import cycles:\n{_describe(cycles)}"


def test_no_import_cycles_in_graph():
    cycles = [c for c in import_cycles() if all(m.startswith("graph.") for m in c)]
    assert not cycles, f"import cycles in graph/:\n{_describe(cycles)}"


# (importing layer, imported layer or outside package) pairs DESIGN.md rules out
FORBIDDEN: dict[str, frozenset[str]] = {
    "graph": frozenset({"torch", "comfy_core", "nodes", "web", "compat", "main"}),
    "comfy_core": frozenset({"graph", "nodes", "web", "compat", "main"}),
    "nodes": frozenset({"web", "compat", "main"}),
    "compat": frozenset({"web", "main"}),
    "web": frozenset({"main"}),
}


def _layer_of(target: str) -> str:
    module = modules().get(target)
    return module.layer if module is not None else target


def test_imports_only_point_down():
    known = modules()
    wrong = [f"{e.source} -> {e.target} (line {e.line})" for e in edges()
             if _layer_of(e.target) in FORBIDDEN.get(known[e.source].layer, frozenset())]
    assert not wrong, "imports against DESIGN.md's layers:\n" + "\n".join(wrong)


def test_only_the_hosts_import_compat():
    known = modules()
    wrong = [f"{e.source} -> {e.target} (line {e.line})" for e in edges()
             if _layer_of(e.target) == "compat" and known[e.source].layer not in ("compat", "web", "main")]
    assert not wrong, "compat is ComfyUI's import surface, installed by the hosts (web/, main.py):\n" + "\n".join(wrong)


def test_compat_uses_only_the_public_modules_of_nodes():
    known = modules()
    wrong = [f"{e.source} -> {e.target} (line {e.line})" for e in edges()
             if known[e.source].layer == "compat" and e.target.startswith("nodes.")
             and any(part.startswith("_") for part in e.target.split(".")[1:])]
    assert not wrong, "compat imports private node modules:\n" + "\n".join(wrong)


def test_the_reader_finds_what_it_should():
    # The checks above are only as good as the reading: known edges of each kind are found.
    found = {(e.source, e.target) for e in edges()}
    assert ("web.app", "web.worker") in found  # module level
    assert ("web.app", "web.warmup") in found  # inside a function
    assert ("comfy_core.checkpoint.bulk", "comfy_core.checkpoint.reader") in found  # under TYPE_CHECKING
    assert ("comfy.model_management", "compat.device_globals") in found  # a surface module, absolute
    assert any(m.layer == "compat" for name, m in modules().items() if name.startswith("comfy."))


LAYERS_DOC = REPO / "docs" / "dev" / "layers.md"


@functools.lru_cache(maxsize=1)
def comfy_core_layers() -> dict[str, int]:
    """docs/dev/layers.md's numbered list: comfy_core folder (or top-level module) -> its line."""
    text = LAYERS_DOC.read_text(encoding="utf-8")
    block = text.split("<!-- layers:begin -->", 1)[1].split("<!-- layers:end -->", 1)[0]
    levels: dict[str, int] = {}
    for line in block.strip().splitlines():
        number, _, names = line.partition(". ")
        for name in names.split("`")[1::2]:
            assert name not in levels, f"{name} listed twice in {LAYERS_DOC}"
            levels[name] = int(number)
    return levels


def _comfy_core_part(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "comfy_core":
        return None
    return parts[1] if len(parts) > 1 else "comfy_core"


def test_every_comfy_core_part_has_a_layer():
    parts = {_comfy_core_part(name) for name in modules()} - {None}
    missing = sorted(parts - set(comfy_core_layers()))
    assert not missing, f"comfy_core parts missing from {LAYERS_DOC.relative_to(REPO)}: {missing}"


def test_comfy_core_imports_only_point_down_its_layers():
    # Module level and inside functions alike (edges() reads every import statement).
    levels = comfy_core_layers()
    wrong = []
    for e in edges():
        source, target = _comfy_core_part(e.source), _comfy_core_part(e.target)
        if source is None or target is None or source == target or source not in levels or target not in levels:
            continue
        if levels[target] >= levels[source]:
            wrong.append(f"{e.source} (line {levels[source]}) -> {e.target} (line {levels[target]}), at line {e.line}")
    assert not wrong, f"imports against {LAYERS_DOC.relative_to(REPO)}:\n" + "\n".join(sorted(set(wrong)))


def test_the_layer_list_reads_as_written():
    levels = comfy_core_layers()
    assert levels["extension_points"] == 1 and levels["models"] < levels["patching"] < levels["sampling"]
    assert levels["comfy_core"] == max(levels.values())
