"""ComfyUI's official workflow templates, filtered to what this server can run.

The editor's Templates panel reads `/templates/index.json` (or `index.<locale>.json`): a list of
modules, each with `templates` entries whose `name` is `<name>.json` (and `<name>-1.webp`, ...,
`logo/<maker>.png` from `index_logo.json`) beside it. Where those files live depends on the
package's layout (`templates_source()`):

- today's (`comfyui-workflow-templates` 0.4 and later, which today's ComfyUI pins): a meta package
  over `comfyui-workflow-templates-core`, whose manifest names each template's files and the
  bundle holding them: workflow JSON and the indexes in `comfyui-workflow-templates-json`, pictures
  and sounds in six `-media-*` packages (`BundledTemplates`);
- the single-folder one (0.1.x, which ComfyUI 0.3.64 pins): every file in the package's
  `templates/` folder (`FolderTemplates`).

We serve the same files, but the index lists only templates whose every node type this server
knows (built-ins and loaded packs), so a user is never offered a workflow that fails on its first
node; the log says how many were left out and why. Node types that only the editor knows (notes,
reroutes, primitives, subgraphs and group nodes defined inside the workflow) need nothing from
the server.

What a template needs is read from its UI-format JSON (`nodes[].type`, the nodes of
`definitions.subgraphs[]` and of `extra.groupNodes`); model files are not checked (they are the
user's to download, as in ComfyUI).
"""
from __future__ import annotations

import importlib.util
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, Protocol

log = logging.getLogger(__name__)

# Node types the editor implements itself: no server node runs them.
EDITOR_ONLY_TYPES = frozenset({"Note", "MarkdownNote", "Reroute", "PrimitiveNode"})
GROUP_NODE_PREFIX = "workflow>"
# Today's layout: the manifest's helper library, and the package holding every template's JSON.
CORE_PACKAGE = "comfyui_workflow_templates_core"
JSON_PACKAGE = "comfyui_workflow_templates_json"
SINGLE_FOLDER_PACKAGE = "comfyui_workflow_templates"


class TemplateSource(Protocol):
    """Where a templates package keeps its files: `path("index.json")`, `path("default-1.webp")`,
    `path("logo/bfl.png")`, ... is the file to serve, or None when the package has no such file
    (or the bundle holding it is not installed)."""

    def path(self, name: str) -> Path | None: ...


def _inside(name: str) -> PurePosixPath | None:
    """`name` as a path inside a templates folder, or None when it would leave it."""
    rel = PurePosixPath(name)
    return None if rel.is_absolute() or ".." in rel.parts or not rel.parts else rel


@dataclass(frozen=True)
class FolderTemplates:
    """The single-folder layout: every file in one `templates/` folder."""

    folder: Path

    def path(self, name: str) -> Path | None:
        rel = _inside(name)
        if rel is None:
            return None
        candidate = self.folder.joinpath(*rel.parts)
        return candidate if candidate.is_file() else None


@dataclass
class BundledTemplates:
    """Today's layout: JSON files (workflows and indexes) are all in the json package and read
    from its folder directly (the indexes and the node filter need no manifest); any other file is
    resolved through the core package's public helpers (`iter_templates` to learn which template
    a file belongs to, `get_asset_path` for where its bundle keeps it)."""

    json_folder: Path
    _owner: dict[str, str] | None = field(default=None, repr=False)

    def path(self, name: str) -> Path | None:
        rel = _inside(name)
        if rel is None:
            return None
        candidate = self.json_folder.joinpath(*rel.parts)
        if candidate.is_file():
            return candidate
        template_id = self._owners().get(rel.as_posix())
        if template_id is None:
            return None
        from comfyui_workflow_templates_core import get_asset_path

        try:
            found = Path(get_asset_path(template_id, rel.as_posix()))
        except (FileNotFoundError, KeyError):  # its media bundle is not installed
            return None
        return found if found.is_file() else None

    def _owners(self) -> dict[str, str]:
        """File name -> the id of the template the manifest lists it under."""
        if self._owner is None:
            from comfyui_workflow_templates_core import iter_templates

            self._owner = {asset.filename: entry.template_id
                           for entry in iter_templates() for asset in entry.assets}
        return self._owner


def _package_templates_folder(package: str) -> Path | None:
    """The `templates/` folder of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        if (Path(location) / "templates").is_dir():
            return Path(location) / "templates"
    return None


def templates_source() -> TemplateSource | None:
    """The installed templates package's files (today's layout first), or None when there is none."""
    json_folder = _package_templates_folder(JSON_PACKAGE)
    if json_folder is not None and importlib.util.find_spec(CORE_PACKAGE) is not None:
        return BundledTemplates(json_folder)
    folder = _package_templates_folder(SINGLE_FOLDER_PACKAGE)
    return FolderTemplates(folder) if folder is not None else None


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
    """The filtered indexes of one templates package (its `source`) for one registry.

    `available(name)` says whether template `name` runs here; `filtered(index)` is an index
    (the parsed `index*.json`) with only those templates, and modules left empty dropped.
    """

    source: TemplateSource
    known: Callable[[str], bool]
    _needs: dict[str, frozenset[str] | None] = field(default_factory=dict)

    def needs(self, name: str) -> frozenset[str] | None:
        """Node types template `name` needs, or None when its workflow file is missing or unreadable."""
        if name not in self._needs:
            path = self.source.path(f"{name}.json")
            try:
                if path is None:
                    raise OSError(f"no {name}.json")
                workflow = json.loads(path.read_text(encoding="utf-8"))
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
