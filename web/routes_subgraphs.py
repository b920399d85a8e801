"""Subgraph blueprints (`/global_subgraphs`) and node replacements (`/node_replacements`).

Shapes after today's ComfyUI: app/subgraph_manager.py (its blueprint index as in
karrareddy28-ui/comfyui @1f3511cf, a copy of Comfy-Org/ComfyUI; `essentials_category` as in
2018065581/ComfyUI @d88b19d9) and app/node_replace_manager.py @b5d74ccb (Comfy-Org/ComfyUI).

  GET /global_subgraphs       {id: {source, name, info: {node_pack, ...}, essentials_category?}}
  GET /global_subgraphs/{id}  the same entry plus "data", the blueprint file's text; 404 if unknown
                              (ComfyUI answers `null`; the editor treats both as a failure)
  GET /node_replacements      {old_type: [{new_node_id, old_node_id, old_widget_ids,
                              input_mapping, output_mapping}]}

Blueprints come from two places, as in ComfyUI:
- every pack folder's `subgraphs/*.json` (source "custom_node", node_pack "custom_nodes.<folder>");
- the blueprint folder of the `comfyui-subgraph-blueprints` package when it is installed (source
  "templates"): its `index.json` (`[{moduleName, blueprints: [{name, includeOnDistributions?,
  requiresCustomNodes?}]}]`) lists them, else every `*.json` there (node_pack "comfyui").
The user's own blueprints (`user/<user>/subgraphs/`) are not listed here: the editor reads them
through `/userdata?dir=subgraphs`, as with ComfyUI. An id is the SHA-256 of source + file path,
stable across restarts. Folders are read again at every request (new files show up at once).
"""
from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import logging
from pathlib import Path
from typing import Iterable

from aiohttp import web

from web.state import AppState

log = logging.getLogger(__name__)

CUSTOM_NODE = "custom_node"
TEMPLATES = "templates"
BLUEPRINT_PACKAGE = "comfyui_subgraph_blueprints"


def installed_blueprint_dirs() -> list[Path]:
    """The `blueprints/` folder of the installed `comfyui-subgraph-blueprints` package (found
    without importing it), or nothing."""
    try:
        spec = importlib.util.find_spec(BLUEPRINT_PACKAGE)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) / "blueprints" for p in spec.submodule_search_locations if (Path(p) / "blueprints").is_dir()]


def _entry(path: Path, source: str, node_pack: str) -> tuple[str, dict]:
    file = path.as_posix()
    entry_id = hashlib.sha256(f"{source}{file}".encode()).hexdigest()
    return entry_id, {"source": source, "name": path.stem, "path": file, "info": {"node_pack": node_pack}}


def _essentials_category(path: Path) -> str | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        first = data["definitions"]["subgraphs"][0]
        category = first.get("essentials_category")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    return category if isinstance(category, str) and category else None


def _pack_blueprints(pack_dirs: Iterable[Path]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for pack_dir in pack_dirs:
        for path in sorted((pack_dir / "subgraphs").glob("*.json")):
            entry_id, entry = _entry(path, CUSTOM_NODE, f"custom_nodes.{pack_dir.name}")
            found[entry_id] = entry
    return found


def _package_blueprints(folder: Path) -> dict[str, dict]:
    found: dict[str, dict] = {}
    index_path = folder / "index.json"
    if not index_path.is_file():
        for path in sorted(folder.glob("*.json")):
            entry_id, entry = _entry(path, TEMPLATES, "comfyui")
            category = _essentials_category(path)
            if category:
                entry["essentials_category"] = category
            found[entry_id] = entry
        return found
    try:
        categories = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        log.error("blueprint index %s could not be read: %s", index_path, exc)
        return found
    if not isinstance(categories, list):
        log.error("blueprint index %s is not a list", index_path)
        return found
    root = folder.resolve()
    for category in categories:
        if not isinstance(category, dict):
            continue
        module_name = str(category.get("moduleName", "default"))
        for blueprint in category.get("blueprints", []) or []:
            name = blueprint.get("name") if isinstance(blueprint, dict) else None
            if not isinstance(name, str) or not name:
                continue
            path = (folder / f"{name}.json").resolve()
            if root not in path.parents or not path.is_file():
                log.warning("blueprint %r of %s is not a file in %s; skipped", name, index_path, folder)
                continue
            entry_id, entry = _entry(path, TEMPLATES, module_name)
            for key in ("includeOnDistributions", "requiresCustomNodes"):
                if blueprint.get(key) is not None:
                    entry["info"][key] = blueprint[key]
            category_name = _essentials_category(path)
            if category_name:
                entry["essentials_category"] = category_name
            found[entry_id] = entry
    return found


def all_blueprints(pack_dirs: Iterable[Path], blueprint_dirs: Iterable[Path]) -> dict[str, dict]:
    """Every blueprint entry by id, with its file `path` (not sent to clients)."""
    found = _pack_blueprints(pack_dirs)
    for folder in blueprint_dirs:
        found.update(_package_blueprints(folder))
    return found


def _public(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k != "path"}


def subgraph_routes(state: AppState, *, blueprint_dirs: Iterable[Path] | None = None) -> web.RouteTableDef:
    """`/global_subgraphs*` and `/node_replacements` for `state`; also registers the packs'
    node_replacements.json files in `state.node_replacements`."""
    state.node_replacements.load_packs(state.packs)
    pack_dirs = [Path(p.path) for p in state.packs if getattr(p, "path", None) and Path(p.path).is_dir()]
    blueprint_folders = list(installed_blueprint_dirs() if blueprint_dirs is None else blueprint_dirs)
    routes = web.RouteTableDef()

    def listing() -> dict[str, dict]:
        return all_blueprints(pack_dirs, blueprint_folders)

    @routes.get("/global_subgraphs")
    async def get_global_subgraphs(request: web.Request) -> web.Response:
        found = await asyncio.to_thread(listing)
        return web.json_response({entry_id: _public(entry) for entry_id, entry in found.items()})

    @routes.get("/global_subgraphs/{id}")
    async def get_global_subgraph(request: web.Request) -> web.Response:
        entry_id = request.match_info["id"]
        entry = (await asyncio.to_thread(listing)).get(entry_id)
        if entry is None:
            return web.json_response({"error": {"type": "not_found", "message": f"no subgraph blueprint {entry_id!r}"}},
                                     status=404)
        try:
            data = await asyncio.to_thread(Path(entry["path"]).read_text, encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            return web.json_response({"error": {"type": "not_found", "message": f"blueprint unreadable: {exc}"}},
                                     status=404)
        return web.json_response({**_public(entry), "data": data})

    @routes.get("/node_replacements")
    async def get_node_replacements(request: web.Request) -> web.Response:
        return web.json_response(state.node_replacements.as_dict())

    return routes

