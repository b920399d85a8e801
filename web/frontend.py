"""Serve ComfyUI's official browser editor, unmodified, plus frontend extensions.

The editor is the pip package `comfyui-frontend-package`, pinned to one exact version: its
`static/` folder (found as ComfyUI finds it, `importlib.resources.files(pkg) / "static"`) is
served at `/`. We never patch it; we customise it only through settings defaults, server
responses and ES-module extensions (`../shared/reference/frontend.md` §7).

What this module adds to an aiohttp app (`add_frontend_routes`):
- `GET /` and `/index.html` (no-cache), and every file of the static folder, with an explicit
  JavaScript MIME type for module scripts (without touching the process-wide `mimetypes` table).
- `Content-Security-Policy: connect-src 'self' blob: data:` on every response, so the editor
  cannot reach any other host (release notes, telemetry): its fetches, WebSocket and workers
  stay on this server.
- `GET /extensions` (bare and `/api`): the ES modules the editor imports at start-up: ours
  (`web/extensions/*.js`, under `/extensions/comfy-engine/`) and each pack's `WEB_DIRECTORY`
  scripts under `/extensions/<pack>/`.
- `GET /extensions/<name>/<path>`: those files (`core` is the editor's own shims folder).

Settings defaults that keep the editor quiet and show our default graph live in
`editor_default_settings()`; `web.userdata` serves them under the stored settings.
"""
from __future__ import annotations

import importlib.metadata
import importlib.resources
import logging
import mimetypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

from aiohttp import web

from web.confined_path import PathOutsideRoot, confined_path

log = logging.getLogger(__name__)

FRONTEND_DISTRIBUTION = "comfyui-frontend-package"
FRONTEND_MODULE = "comfyui_frontend_package"
PINNED_FRONTEND_VERSION = "1.58.1"
CONTENT_SECURITY_POLICY = "connect-src 'self' blob: data:"
# Our own extension's URL segment: /extensions/comfy-engine/<file>.js
OWN_EXTENSION_NAME = "comfy-engine"
OWN_EXTENSION_DIR = Path(__file__).resolve().parent / "extensions"
# The editor's own folder under static/extensions; the editor never imports URLs containing it.
EDITOR_CORE_EXTENSIONS = "core"

# Types the editor needs right; anything else falls back to `mimetypes.guess_type`.
_CONTENT_TYPES = {
    ".js": "application/javascript; charset=utf-8",
    ".mjs": "application/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".wasm": "application/wasm",
    ".woff2": "font/woff2",
    ".woff": "font/woff",
    ".ttf": "font/ttf",
    ".ico": "image/x-icon",
    ".png": "image/png",
    ".webp": "image/webp",
}
# ComfyUI's cache middleware: scripts, styles and documents are revalidated on every load.
_REVALIDATE = {".js", ".mjs", ".css", ".html", ".json"}


class FrontendError(RuntimeError):
    """The editor package is missing, or not the pinned version."""


def editor_default_settings() -> dict[str, Any]:
    """Server-side defaults for the editor's settings (stored user values win).

    - `Comfy.Notification.ShowVersionUpdates: False`: no release-notes fetch from Comfy's servers.
    - `Comfy.TutorialCompleted: True`: a fresh browser opens the default graph (which our
      extension replaces with our text-to-image workflow) instead of a blank canvas and an
      empty template browser.
    """
    return {"Comfy.Notification.ShowVersionUpdates": False, "Comfy.TutorialCompleted": True}


def frontend_root(expected_version: str | None = PINNED_FRONTEND_VERSION) -> Path:
    """The installed editor's static folder; `FrontendError` when the package is missing or
    (with `expected_version`) is another version than the pinned one."""
    try:
        installed = importlib.metadata.version(FRONTEND_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise FrontendError(f"the browser editor is not installed: pip install "
                            f"{FRONTEND_DISTRIBUTION}=={PINNED_FRONTEND_VERSION}") from None
    if expected_version is not None and installed != expected_version:
        raise FrontendError(f"{FRONTEND_DISTRIBUTION} {installed} is installed but this server is pinned "
                            f"to {expected_version}: pip install {FRONTEND_DISTRIBUTION}=={expected_version}")
    root = Path(str(importlib.resources.files(FRONTEND_MODULE) / "static"))
    if not (root / "index.html").is_file():
        raise FrontendError(f"{FRONTEND_DISTRIBUTION} {installed} has no static/index.html at {root}")
    return root


def content_type_for(path: Path) -> str:
    suffix = path.suffix.lower()
    return _CONTENT_TYPES.get(suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def file_response(path: Path) -> web.FileResponse:
    headers = {"Content-Type": content_type_for(path)}
    if path.suffix.lower() in _REVALIDATE:
        headers["Cache-Control"] = "no-cache"
    return web.FileResponse(path, headers=headers)


def serve_confined(root: Path, relative: str, what: str) -> web.StreamResponse:
    """The file `relative` under `root` (confined, see `web.confined_path`), or a JSON 404/403."""
    try:
        path = confined_path(root, relative, what=what)
    except PathOutsideRoot as exc:
        return _json_error(403, "invalid_path", str(exc))
    if not path.is_file():
        return _json_error(404, "not_found", f"{what}: no file {relative!r}")
    return file_response(path)


def _json_error(status: int, type_: str, message: str) -> web.Response:
    return web.json_response({"error": {"type": type_, "message": message, "details": ""}}, status=status)


@dataclass
class WebExtensions:
    """The folders served under `/extensions/<name>/`, by name, in listing order."""

    folders: dict[str, Path] = field(default_factory=dict)

    def add(self, name: str, folder: Path | str) -> None:
        """Serve `folder` as `/extensions/<name>/`; the same name twice must be the same folder."""
        folder = Path(folder).resolve()
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"web extension name {name!r} cannot be one URL path segment")
        if name == EDITOR_CORE_EXTENSIONS:
            raise ValueError(f"web extension name {name!r} is the editor's own folder")
        if not folder.is_dir():
            raise ValueError(f"web extension {name!r}: WEB_DIRECTORY {folder} is not a folder")
        known = self.folders.get(name)
        if known is not None and known != folder:
            raise ValueError(f"web extension {name!r} is already served from {known}, not {folder}")
        self.folders[name] = folder

    def script_urls(self) -> list[str]:
        """Every `.js` file under every folder, as the URL the editor imports (ComfyUI lists
        `**/*.js` of each WEB_DIRECTORY; the editor `import()`s each as an ES module)."""
        urls = []
        for name, folder in self.folders.items():
            for path in sorted(folder.rglob("*.js")):
                if path.is_file() and path.resolve().is_relative_to(folder):
                    urls.append(f"/extensions/{quote(name)}/{quote(path.relative_to(folder).as_posix())}")
        return urls


WEB_EXTENSIONS_KEY: web.AppKey[WebExtensions] = web.AppKey("comfy_engine_web_extensions", WebExtensions)


def pack_web_directories(packs: Iterable[Any]) -> dict[str, Path]:
    """`{pack name: WEB_DIRECTORY}` of loaded packs (`graph.packs.PackResult`) that have one."""
    found = {}
    for pack in packs:
        web_dir = getattr(pack, "web_directory", None)
        if getattr(pack, "ok", True) and web_dir:
            found[str(pack.name)] = Path(web_dir)
    return found


def add_pack_web_directories(app: web.Application, packs: Iterable[Any]) -> list[str]:
    """Serve each pack's `WEB_DIRECTORY` under `/extensions/<pack>/` and list its scripts in
    `GET /extensions`. Call after `add_frontend_routes`; calling it again with the same packs
    is harmless. A pack whose folder cannot be served (missing, or its name taken) is logged
    and left out, as ComfyUI does with a broken pack: one pack must not stop the server.
    Returns the error messages of the packs left out."""
    extensions = app[WEB_EXTENSIONS_KEY]
    errors = []
    for name, folder in pack_web_directories(packs).items():
        try:
            extensions.add(name, folder)
        except ValueError as exc:
            log.error("web files of pack %r are not served: %s", name, exc)
            errors.append(str(exc))
    return errors


def _has_get_route(app: web.Application, path: str) -> bool:
    return any(route.method == "GET" and route.resource is not None and route.resource.canonical == path
               for route in app.router.routes())


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)


def add_frontend_routes(app: web.Application, state: Any = None, *, root: Path | None = None) -> WebExtensions:
    """Serve the editor at `/`, our extension and the packs in `state.packs`
    (`web.state.AppState`; may be None) under `/extensions/`, and `GET /extensions`.

    Routes are exact paths and per-folder prefixes of the static folder (no catch-all), so
    the order in which the app factory registers route groups does not matter.
    """
    static = Path(root) if root is not None else frontend_root()
    extensions = WebExtensions()
    extensions.add(OWN_EXTENSION_NAME, OWN_EXTENSION_DIR)
    app[WEB_EXTENSIONS_KEY] = extensions
    if state is not None:
        add_pack_web_directories(app, getattr(state, "packs", ()) or ())
        if hasattr(state, "frontend_root"):
            state.frontend_root = static  # ComfyUI's `PromptServer.instance.web_root`, for packs

    async def index(request: web.Request) -> web.StreamResponse:
        return file_response(static / "index.html")

    async def list_extensions(request: web.Request) -> web.Response:
        return web.json_response(extensions.script_urls())

    async def extension_file(request: web.Request) -> web.StreamResponse:
        name, relative = request.match_info["name"], request.match_info["path"]
        if name == EDITOR_CORE_EXTENSIONS:
            return serve_confined(static / "extensions" / EDITOR_CORE_EXTENSIONS, relative, "editor extension")
        folder = extensions.folders.get(name)
        if folder is None:
            return _json_error(404, "not_found", f"no web extension named {name!r}")
        return serve_confined(folder, relative, f"web extension {name!r}")

    def static_folder(folder: str):
        async def handler(request: web.Request) -> web.StreamResponse:
            return serve_confined(static / folder, request.match_info["path"], "editor file")
        return handler

    def static_file(path: Path):
        async def handler(request: web.Request) -> web.StreamResponse:
            return file_response(path)
        return handler

    app.router.add_get("/", index)
    for prefix in ("", "/api"):
        if not _has_get_route(app, prefix + "/extensions"):  # the app factory may list them itself
            app.router.add_get(prefix + "/extensions", list_extensions)
    app.router.add_get("/extensions/{name}/{path:.+}", extension_file)
    for entry in sorted(static.iterdir()):
        if entry.name == "extensions":
            continue  # served by extension_file together with ours and the packs'
        if entry.is_dir():
            app.router.add_get(f"/{quote(entry.name)}/{{path:.+}}", static_folder(entry.name))
        elif entry.is_file():
            app.router.add_get(f"/{quote(entry.name)}", static_file(entry))
    app.on_response_prepare.append(_security_headers)
    return extensions
