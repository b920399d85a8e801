"""ComfyUI's official workflow templates (the `comfyui-workflow-templates` package), filtered to
what this server can run.

The editor's Templates panel reads `/templates/index.json` (or `index.<locale>.json`): a list of
modules, each with `templates` entries whose `name` is `<name>.json` (and `<name>-1.webp`, ...)
beside it. ComfyUI serves the package folder as it is. We serve the same files, but the index
lists only templates whose every node type this server knows (built-ins and loaded packs), so a
user is never offered a workflow that fails on its first node; the log says how many were left
out and why. Node types that only the editor knows (notes, reroutes, primitives, subgraphs and
group nodes defined inside the workflow) need nothing from the server.

What a template needs is read from its UI-format JSON (`nodes[].type`, the nodes of
`definitions.subgraphs[]` and of `extra.groupNodes`); model files are not checked (they are the
user's to download, as in ComfyUI).
"""
from __future__ import annotations

import importlib.util
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

log = logging.getLogger(__name__)

# Node types the editor implements itself: no server node runs them.
EDITOR_ONLY_TYPES = frozenset({"Note", "MarkdownNote", "Reroute", "PrimitiveNode"})
GROUP_NODE_PREFIX = "workflow>"


def templates_dir() -> Path | None:
    """The package's `templates/` folder, or None when the package is not installed."""
    spec = importlib.util.find_spec("comfyui_workflow_templates")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "templates"
    return folder if folder.is_dir() else None


def required_node_types(workflow: dict[str, Any]) -> set[str]:
    """The node types a UI-format workflow needs from the server."""
    defined_subgraphs = {sub.get("id") for sub in _list(_dict(workflow.get("definitions")).get("subgraphs"))}
    group_nodes = _dict(_dict(workflow.get("extra")).get("groupNodes"))
    node_lists = [_list(workflow.get("nodes"))]
    node_lists += [_list(_dict(sub).get("nodes")) for sub in _list(_dict(workflow.get("definitions")).get("subgraphs"))]
    node_lists += [_list(_dict(group).get("nodes")) for group in group_nodes.values()]
    needed: set[str] = set()
    for nodes in node_lists:
        for node in nodes:
            kind = _dict(node).get("type")
            if not isinstance(kind, str) or kind in EDITOR_ONLY_TYPES or kind in defined_subgraphs:
                continue
            if kind.startswith(GROUP_NODE_PREFIX) and kind[len(GROUP_NODE_PREFIX):] in group_nodes:
                continue
            needed.add(kind)
    return needed


@dataclass
class TemplateIndex:
    """The filtered indexes of one templates folder for one registry.

    `available(name)` says whether template `name` runs here; `filtered(index)` is an index
    (the parsed `index*.json`) with only those templates, and modules left empty dropped.
    """

    folder: Path
    known: Callable[[str], bool]
    _needs: dict[str, frozenset[str] | None] = field(default_factory=dict)

    def needs(self, name: str) -> frozenset[str] | None:
        """Node types template `name` needs, or None when its workflow file is missing or unreadable."""
        if name not in self._needs:
            try:
                workflow = json.loads((self.folder / f"{name}.json").read_text(encoding="utf-8"))
                self._needs[name] = frozenset(required_node_types(_dict(workflow)))
            except (OSError, ValueError):
                self._needs[name] = None
        return self._needs[name]

    def missing(self, name: str) -> list[str]:
        needs = self.needs(name)
        if needs is None:
            return ["(workflow file unreadable)"]
        return sorted(kind for kind in needs if not self.known(kind))

    def available(self, name: str) -> bool:
        return not self.missing(name)

    def filtered(self, index: Iterable[Any]) -> list[dict[str, Any]]:
        modules = []
        for module in index:
            if not isinstance(module, dict):
                continue
            kept = [t for t in _list(module.get("templates")) if isinstance(t, dict)
                    and isinstance(t.get("name"), str) and self.available(t["name"])]
            if kept:
                modules.append({**module, "templates": kept})
        return modules

    def summary(self, index: Iterable[Any]) -> tuple[int, int, dict[str, int]]:
        """(templates listed, templates runnable, missing node type -> how many templates lack it)."""
        total = runnable = 0
        lacking: dict[str, int] = {}
        for module in index:
            for template in _list(_dict(module).get("templates")):
                name = _dict(template).get("name")
                if not isinstance(name, str):
                    continue
                total += 1
                missing = self.missing(name)
                runnable += not missing
                for kind in missing:
                    lacking[kind] = lacking.get(kind, 0) + 1
        return total, runnable, lacking


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []
