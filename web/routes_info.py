"""Read-only information routes: node definitions, system stats, features, model lists."""
from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
from pathlib import Path
from urllib.parse import quote

import psutil
from aiohttp import web

from web.state import AppState, state_of
from web.warmup import loaded_module

# The ComfyUI release whose wire contract we follow (reference/comfyui-contract.md, 2025-10,
# plus the later /jobs routes); the editor reads it from /system_stats.
COMFYUI_COMPAT_VERSION = "0.3.64"
PROJECT_EXTENSION_PREFIX = "/extensions/comfy-engine"


def features(state: AppState) -> dict:
    """Server feature flags (`/features` and the WebSocket `feature_flags` reply)."""
    return {"supports_preview_metadata": True, "max_upload_size": state.config.max_upload_bytes}


def _frontend_version() -> str:
    try:
        from importlib.metadata import version
        return version("comfyui-frontend-package")
    except Exception:  # noqa: BLE001 -- not installed: the editor is simply absent
        return ""


def _devices(state: AppState) -> list[dict]:
    return devices(cpu_only=state.config.cpu)


def devices(*, cpu_only: bool) -> list[dict]:
    """This process's devices as /system_stats lists them (also each Ray worker's own)."""
    vm = psutil.virtual_memory()
    cpu = {"name": "cpu", "type": "cpu", "index": None, "vram_total": vm.total, "vram_free": vm.available,
           "torch_vram_total": vm.total, "torch_vram_free": vm.available}
    # Never imported just for this, and never read while another thread is still importing it
    # (the background warm-up): until then the CPU facts are all there is to say.
    torch = loaded_module("torch")
    if torch is None or cpu_only or not torch.cuda.is_available():
        return [cpu]
    devices = []
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        reserved = torch.cuda.memory_reserved(index)
        allocated = torch.cuda.memory_allocated(index)
        devices.append({"name": f"cuda:{index} {torch.cuda.get_device_name(index)}", "type": "cuda",
                        "index": index, "vram_total": total, "vram_free": free,
                        "torch_vram_total": reserved, "torch_vram_free": reserved - allocated})
    return devices


def system_stats(state: AppState) -> dict:
    vm = psutil.virtual_memory()
    torch = loaded_module("torch")
    return {
        "system": {
            "os": os.name, "ram_total": vm.total, "ram_free": vm.available,
            "comfyui_version": COMFYUI_COMPAT_VERSION,
            "required_frontend_version": _frontend_version(),
            "python_version": sys.version, "pytorch_version": getattr(torch, "__version__", ""),
            "embedded_python": False, "argv": list(state.config.argv) or ["main.py"],
            "platform": platform.platform(),
        },
        "devices": _devices(state),
        # --ray: every worker actor and its devices (an extra key; ComfyUI's clients ignore it).
        **({"workers": state.worker.workers_info()} if hasattr(state.worker, "workers_info") else {}),
    }


def extension_urls(state: AppState, own_dir: Path) -> list[str]:
    """Every JS file the editor should load: ours (web/extensions) and each pack's WEB_DIRECTORY.

    Only used when the editor is not served (`web.frontend` lists and serves these otherwise)."""
    urls: list[str] = []
    if own_dir.is_dir():
        for path in sorted(own_dir.rglob("*.js")):
            urls.append(f"{PROJECT_EXTENSION_PREFIX}/{path.relative_to(own_dir).as_posix()}")
    for pack in state.packs:
        web_dir = getattr(pack, "web_directory", None)
        if not getattr(pack, "ok", True) or not web_dir or not Path(web_dir).is_dir():
            continue
        root = Path(web_dir)
        for path in sorted(root.rglob("*.js")):
            rel = path.relative_to(root).as_posix()
            urls.append(f"/extensions/{quote(pack.name)}/{rel}")
    return urls


MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024


class MetadataError(Exception):
    """A safetensors header that cannot be read: carries the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def safetensors_metadata(path: Path) -> dict | None:
    """The `__metadata__` dict of a safetensors file's JSON header (None when it has none).

    Format: 8-byte little-endian header length, then that many bytes of JSON."""
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise MetadataError(400, f"{path.name} is too short to be a safetensors file")
        length = int.from_bytes(raw, "little")
        if length > MAX_SAFETENSORS_HEADER:
            raise MetadataError(400, f"{path.name}: header of {length} bytes is larger than allowed")
        try:
            header = json.loads(fh.read(length))
        except ValueError as exc:
            raise MetadataError(400, f"{path.name}: header is not JSON: {exc}") from None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    return meta if isinstance(meta, dict) else None


def info_routes() -> web.RouteTableDef:
    routes = web.RouteTableDef()

    @routes.get("/object_info")
    async def object_info(request: web.Request) -> web.Response:
        state = state_of(request)
        # Combo callables list model folders; keep that disk work off the event loop.
        info = await asyncio.to_thread(state.registry.object_info, state.env)
        return web.json_response(info)

    @routes.get("/object_info/{node_class}")
    async def object_info_one(request: web.Request) -> web.Response:
        state = state_of(request)
        info = await asyncio.to_thread(state.registry.object_info_for, request.match_info["node_class"], state.env)
        return web.json_response(info)

    @routes.get("/system_stats")
    async def get_system_stats(request: web.Request) -> web.Response:
        return web.json_response(system_stats(state_of(request)))

    @routes.get("/features")
    async def get_features(request: web.Request) -> web.Response:
        return web.json_response(features(state_of(request)))

    @routes.get("/embeddings")
    async def embeddings(request: web.Request) -> web.Response:
        folders = state_of(request).env.folders
        names = await asyncio.to_thread(folders.filenames, "embeddings")
        return web.json_response([os.path.splitext(n)[0] for n in names])

    @routes.get("/models")
    async def model_kinds(request: web.Request) -> web.Response:
        return web.json_response(state_of(request).env.folders.kinds())

    @routes.get("/models/{folder}")
    async def model_files(request: web.Request) -> web.Response:
        folders = state_of(request).env.folders
        folder = request.match_info["folder"]
        if folder not in folders.kinds():
            return web.json_response({"error": {"type": "not_found",
                                                "message": f"unknown model folder {folder!r}",
                                                "known": folders.kinds()}}, status=404)
        return web.json_response(await asyncio.to_thread(folders.filenames, folder))

    @routes.get("/view_metadata/{folder}")
    async def view_metadata(request: web.Request) -> web.Response:
        folders = state_of(request).env.folders
        folder, filename = request.match_info["folder"], request.query.get("filename", "")
        if folder not in folders.kinds():
            return web.json_response({"error": {"type": "not_found", "message": f"unknown model folder {folder!r}"}},
                                     status=404)
        if not filename.endswith(".safetensors"):
            return web.json_response({"error": {"type": "not_found",
                                                "message": "filename must name a .safetensors file"}}, status=404)
        path = folders.full_path(folder, filename)  # None for anything outside the folder
        if path is None:
            return web.json_response({"error": {"type": "not_found", "message": f"no {folder} file {filename!r}"}},
                                     status=404)
        try:
            meta = await asyncio.to_thread(safetensors_metadata, path)
        except MetadataError as exc:
            return web.json_response({"error": {"type": "bad_file", "message": str(exc)}}, status=exc.status)
        if meta is None:
            return web.json_response({"error": {"type": "not_found", "message": f"{filename} has no metadata"}},
                                     status=404)
        return web.json_response(meta)

    return routes
