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

from compat.feature_flags import core_features, server_features
from compat.version import COMFYUI_VERSION
from web import pack_start
from web.state import AppState, state_of
from web.warmup import loaded_module

PROJECT_EXTENSION_PREFIX = "/extensions/comfy-engine"


def features(state: AppState) -> dict:
    """Server feature flags (`/features` and the WebSocket `feature_flags` reply): today's ComfyUI
    core flags for what this server serves, then the `--feature-flag KEY[=VALUE]` items that do
    not name a core flag (compat/feature_flags.py). `node_replacements`: the editor reads
    /node_replacements only when it is true; `assets`: whether the assets API is on."""
    core = core_features(max_upload_bytes=state.config.max_upload_bytes,
                         assets=bool(getattr(state.config, "enable_assets", False)))
    return server_features(core, state.config.comfy_flags.get("feature_flag") or ())


REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements.txt"
_DEFAULT_DEPLOY_ENVIRONMENT = "local-git"  # ComfyUI's, for a server run from its source folder


def _installed_version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001 -- not installed
        return None


def required_package_versions(requirements: Path = REQUIREMENTS) -> dict[str, str]:
    """`{package: version}` for every `name==version` pin in requirements.txt (ComfyUI reads
    its own requirements.txt the same way for /system_stats)."""
    pins: dict[str, str] = {}
    try:
        lines = requirements.read_text(encoding="utf-8").splitlines()
    except OSError:
        return pins
    for line in lines:
        line = line.split("#", 1)[0].strip()
        name, sep, version = line.partition("==")
        if sep and name.strip() and version.strip():
            pins[name.strip().lower()] = version.strip()
    return pins


def deploy_environment(base_dir: Path | None) -> str:
    """ComfyUI's `deploy_environment`: the first line of `<base>/.comfy_environment` (printable
    ASCII, at most 128 characters) or "local-git" (comfy/deploy_environment.py)."""
    if base_dir is not None:
        try:
            with open(Path(base_dir) / ".comfy_environment", encoding="utf-8") as fh:
                value = "".join(c for c in fh.readline(128).strip() if 32 <= ord(c) < 127)
            if value:
                return value
        except (OSError, UnicodeDecodeError):
            pass
    return _DEFAULT_DEPLOY_ENVIRONMENT


def comfy_package_versions(pins: dict[str, str]) -> list[dict]:
    """`[{name, installed, required}]` for every pinned package whose name starts with "comfy"."""
    return [{"name": name, "installed": _installed_version(name), "required": required}
            for name, required in pins.items() if name.startswith("comfy")]


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
    """ComfyUI's /system_stats (server.py @002c3fb9, Comfy-Org/ComfyUI): required versions are
    the pins of our requirements.txt, installed ones what this environment has."""
    vm = psutil.virtual_memory()
    torch = loaded_module("torch")
    pins = required_package_versions()
    return {
        "system": {
            "os": sys.platform, "ram_total": vm.total, "ram_free": vm.available,
            "comfyui_version": COMFYUI_VERSION,  # the one constant packs' comfyui_version reads too
            "required_frontend_version": pins.get("comfyui-frontend-package")
            or _installed_version("comfyui-frontend-package") or "",
            "installed_templates_version": _installed_version("comfyui-workflow-templates"),
            "required_templates_version": pins.get("comfyui-workflow-templates"),
            "comfy_package_versions": comfy_package_versions(pins),
            "python_version": sys.version, "pytorch_version": getattr(torch, "__version__", ""),
            "embedded_python": os.path.basename(os.path.dirname(sys.executable)) == "python_embeded",
            "deploy_environment": deploy_environment(getattr(state.config, "base_dir", None)),
            "argv": list(state.config.argv) or ["main.py"],
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
        # Combo callables list model folders: web/pack_start.py keeps that disk work off the event
        # loop (and answers the packs' nodes from the last start's record while they import).
        return web.json_response(await pack_start.object_info(state_of(request)))

    @routes.get("/object_info/{node_class}")
    async def object_info_one(request: web.Request) -> web.Response:
        return web.json_response(await pack_start.object_info_for(state_of(request), request.match_info["node_class"]))

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
