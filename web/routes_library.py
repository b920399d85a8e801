"""The editor's library panels: Templates, Model Library, Assets.

- `/templates/{file}`: ComfyUI's official templates package, the indexes filtered to what runs
  here (web/workflow_templates.py); `/workflow_templates` and `/workflow_templates/{pack}/{file}`:
  packs' example workflows (their `example_workflows/` folder, or ComfyUI's older names).
- `/experiment/models` and `/experiment/models/{folder}`: model folders and their files with
  size and times; `/experiment/models/preview/{folder}/{index}/{file}`: the picture beside a
  model (`name.png`, `name.preview.png`, ...) as WebP.
- `/internal/files/{output|input|temp}` (newest first) and `/internal/folder_paths`.

Shapes follow ComfyUI's (app/model_manager.py, app/custom_node_manager.py,
api_server/routes/internal/internal_routes.py). Names that come from the request are confined
lexically (no `..`, no absolute paths); links inside model folders are followed, as in ComfyUI.
"""
from __future__ import annotations

import asyncio
import io
import json
import logging
import os
from pathlib import Path, PurePosixPath
from typing import Any

from aiohttp import web

from web.confined_path import find_control_character
from web.state import AppState
from web.workflow_templates import TemplateIndex, templates_source

log = logging.getLogger(__name__)

# ComfyUI's folder names for packs' example workflows, the first one preferred.
EXAMPLE_WORKFLOW_FOLDERS = ("example_workflows", "example", "examples", "workflow", "workflows")
# Folder kinds the model library does not show (ComfyUI's list).
HIDDEN_MODEL_KINDS = frozenset({"configs", "custom_nodes"})
PREVIEW_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")
FILE_FOLDER_TYPES = ("output", "input", "temp")


def _json_error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"error": {"type": kind, "message": message}}, status=status)


def _safe_relative(name: str) -> PurePosixPath | None:
    rel = PurePosixPath(name.replace("\\", "/"))
    if not name or rel.is_absolute() or ".." in rel.parts or find_control_character(name) is not None:
        return None
    return rel


def _model_kinds(state: AppState) -> list[str]:
    return [kind for kind in state.env.folders.kinds() if kind not in HIDDEN_MODEL_KINDS]


def _model_files(state: AppState, kind: str) -> list[dict[str, Any]]:
    listed = []
    for entry in state.env.folders.entries(kind):
        try:
            stat = entry.path.stat()
        except OSError as exc:  # a dangling link: skipped, as ComfyUI does
            log.warning("model library: cannot read %s: %s", entry.path, exc)
            continue
        listed.append({"name": entry.name, "pathIndex": entry.path_index, "modified": stat.st_mtime,
                       "created": stat.st_ctime, "size": stat.st_size})
    return listed


def _preview_webp(model: Path) -> bytes | None:
    """The first picture beside `model` (`stem.png`, `stem.preview.png`, ...), re-encoded as WebP."""
    from PIL import Image

    stem = model.with_suffix("")
    for base in (stem, stem.with_name(stem.name + ".preview")):
        for suffix in PREVIEW_SUFFIXES:
            candidate = base.with_name(base.name + suffix)
            if candidate.is_file():
                try:
                    with Image.open(candidate) as picture:
                        out = io.BytesIO()
                        picture.save(out, format="WEBP")
                        return out.getvalue()
                except OSError as exc:
                    log.warning("model library: unreadable preview %s: %s", candidate, exc)
    return None


def _directory_of(state: AppState, folder_type: str) -> Path:
    env = state.env
    return {"output": env.output_dir, "input": env.input_dir, "temp": env.temp_dir}[folder_type]


def _files_newest_first(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    files = [entry for entry in os.scandir(folder) if entry.is_file()]
    files.sort(key=lambda entry: -entry.stat().st_mtime)
    return [entry.name for entry in files]


def _pack_workflow_folders(state: AppState) -> dict[str, Path]:
    """Pack folder name -> its example workflows folder (the first of ComfyUI's names it has)."""
    found: dict[str, Path] = {}
    for pack in state.packs:
        root = Path(pack.path)
        if not getattr(pack, "ok", False) or not root.is_dir():
            continue
        for name in EXAMPLE_WORKFLOW_FOLDERS:
            if (root / name).is_dir():
                found.setdefault(root.name, root / name)
                break
    return found


def library_routes(state: AppState) -> web.RouteTableDef:
    routes = web.RouteTableDef()
    source = templates_source()
    index = TemplateIndex(source, lambda kind: kind in state.registry) if source is not None else None
    logged: list[bool] = []  # the coverage line is logged once, on the first index request

    @routes.get("/templates/{name:.*}")
    async def template_file(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        rel = _safe_relative(name)
        if rel is None:
            return _json_error(400, "bad_name", f"invalid template file name {name!r}")
        if index is None:
            return _json_error(404, "not_installed", "the comfyui-workflow-templates package is not installed")
        path = await asyncio.to_thread(index.source.path, rel.as_posix())  # the first reads the manifest
        if len(rel.parts) == 1 and rel.name.startswith("index") and rel.suffix == ".json" \
                and rel.name not in ("index.schema.json", "index_logo.json"):
            if path is None:
                return _json_error(404, "not_found", f"no template index {name!r}")
            raw = await asyncio.to_thread(path.read_text, encoding="utf-8")
            try:
                parsed = json.loads(raw)
            except ValueError:  # not ours to judge: the editor gets the file as ComfyUI serves it
                return web.FileResponse(path)
            if not logged:
                logged.append(True)
                await asyncio.to_thread(_log_coverage, index, parsed)
            return web.json_response(await asyncio.to_thread(index.filtered, parsed if isinstance(parsed, list) else []))
        if path is None:
            if rel.name == "index_logo.json":  # older packages have no logo index: the editor then shows none
                return web.json_response({})
            return _json_error(404, "not_found", f"no template file {name!r}")
        return web.FileResponse(path)

    @routes.get("/workflow_templates")
    async def pack_workflow_templates(request: web.Request) -> web.Response:
        listing: dict[str, list[str]] = {}
        for pack_name, workflows in _pack_workflow_folders(state).items():
            names = sorted(p.stem for p in workflows.glob("*.json") if p.is_file())
            if names:
                listing[pack_name] = names
        return web.json_response(listing)

    @routes.get("/workflow_templates/{pack}/{name:.*}")
    async def pack_workflow_file(request: web.Request) -> web.StreamResponse:
        workflows = _pack_workflow_folders(state).get(request.match_info["pack"])
        rel = _safe_relative(request.match_info["name"])
        if workflows is None or rel is None or not (workflows / rel).is_file():
            return _json_error(404, "not_found", "no such example workflow")
        return web.FileResponse(workflows / rel)

    @routes.get("/experiment/models")
    async def model_folders(request: web.Request) -> web.Response:
        return web.json_response([{"name": kind, "folders": [str(p) for p in state.env.folders.paths(kind)]}
                                  for kind in _model_kinds(state)])

    @routes.get("/experiment/models/{folder}")
    async def model_files(request: web.Request) -> web.Response:
        kind = request.match_info["folder"]
        if kind not in _model_kinds(state):
            return _json_error(404, "not_found", f"unknown model folder {kind!r}")
        return web.json_response(await asyncio.to_thread(_model_files, state, kind))

    @routes.get("/experiment/models/preview/{folder}/{path_index}/{name:.*}")
    async def model_preview(request: web.Request) -> web.Response:
        kind, name = request.match_info["folder"], request.match_info["name"]
        rel = _safe_relative(name)
        if kind not in _model_kinds(state) or rel is None:
            return _json_error(404, "not_found", "no such model")
        try:
            root = state.env.folders.paths(kind)[int(request.match_info["path_index"])]
        except (ValueError, IndexError):
            return _json_error(404, "not_found", "no such model folder index")
        picture = await asyncio.to_thread(_preview_webp, root / rel)
        if picture is None:
            return _json_error(404, "not_found", f"no preview for {name!r}")
        return web.Response(body=picture, content_type="image/webp")

    @routes.get("/internal/files/{folder_type}")
    async def internal_files(request: web.Request) -> web.Response:
        folder_type = request.match_info["folder_type"]
        if folder_type not in FILE_FOLDER_TYPES:
            return _json_error(400, "bad_folder_type", f"folder type must be one of {list(FILE_FOLDER_TYPES)}")
        return web.json_response(await asyncio.to_thread(_files_newest_first, _directory_of(state, folder_type)))

    @routes.get("/internal/folder_paths")
    async def internal_folder_paths(request: web.Request) -> web.Response:
        folders = state.env.folders
        return web.json_response({kind: [str(p) for p in folders.paths(kind)] for kind in folders.kinds()})

    return routes


def _log_coverage(index: TemplateIndex, parsed: Any) -> None:
    """One log line: how many official templates this server offers, and the node types most
    of the others lack."""
    total, runnable, lacking = index.summary(parsed if isinstance(parsed, list) else [])
    top = ", ".join(f"{kind} ({count})" for kind, count in sorted(lacking.items(), key=lambda kv: -kv[1])[:5])
    log.info("workflow templates: %d of %d runnable here, the others are not listed%s", runnable, total,
             f"; most missing node types: {top}" if top else "")
