"""`/view`, `/upload/image`, `/upload/mask`: files in the output, input and temp folders.

Every client-supplied name goes through `web.confined_path` (lexical check, then a check after
resolving symlinks), so no request reaches outside its folder. Names are never "fixed up": a name
with a path separator, a control character or `..` is refused with a 400 that says why.
Active content (HTML, SVG, XML, JS, CSS) is only ever sent as a download (ComfyUI CVE-2024-10099,
CVE-2026-56670). Files are sent with HTTP range support (206 partial content), as a video
element seeking needs; their types come from comfy_core.video.media_types.
"""
from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_request import FileField

from comfy_core.video.media_types import media_type
from web.asset_files import AssetError, parse_hash
from web.assets import asset_service
from web.auth.access import auth_of, current_user, may_read_file, may_read_path
from web.confined_path import PathOutsideRoot, confined_path, find_control_character
from web.middlewares import json_error
from web.state import AppState, state_of

FOLDER_TYPES = ("output", "input", "temp")
_ACTIVE_TYPES = {"text/html", "text/html-sandboxed", "application/xhtml+xml", "text/javascript",
                 "application/javascript", "text/css", "image/svg+xml", "application/xml", "text/xml"}
_ANNOTATIONS = {" [output]": "output", " [input]": "input", " [temp]": "temp"}


def is_active_type(content_type: str) -> bool:
    """HTML, SVG, XML, JS, CSS: types a browser would run in this origin (served as downloads)."""
    return content_type.split(";", 1)[0].strip().lower() in _ACTIVE_TYPES


class FileRequestError(Exception):
    """A file request that must be refused: carries the HTTP status and a message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def folder_for(state: AppState, folder_type: str) -> Path:
    env = state.env
    dirs = {"output": env.output_dir, "input": env.input_dir, "temp": env.temp_dir}
    if folder_type not in dirs:
        raise FileRequestError(400, f"type must be one of {list(FOLDER_TYPES)}, got {folder_type!r}")
    return Path(dirs[folder_type])


def check_file_name(name: str, what: str = "filename") -> str:
    """A bare file name, or `FileRequestError(400)`: no separators, `..`, control characters."""
    if not isinstance(name, str) or not name.strip():
        raise FileRequestError(400, f"{what} is empty")
    if name in (".", "..") or "/" in name or "\\" in name:
        raise FileRequestError(400, f"{what} {name!r} must be a plain file name (no '/', '\\\\' or '..')")
    if find_control_character(name) is not None:
        raise FileRequestError(400, f"{what} {name!r} contains control characters")
    return name


def resolve_file(state: AppState, folder_type: str, subfolder: str, filename: str) -> Path:
    """The path of `subfolder/filename` inside the folder of `folder_type` (may not exist yet)."""
    base = folder_for(state, folder_type)
    check_file_name(filename)
    sub = subfolder.rstrip("/")  # "a/" is "a"; a leading "/" is an absolute path and refused below
    relative = f"{sub}/{filename}" if sub else filename
    try:
        return confined_path(base, relative, what=f"{folder_type} file")
    except PathOutsideRoot as exc:
        raise FileRequestError(403 if exc.reason == "resolves outside its folder" else 400, str(exc)) from None


def split_annotation(filename: str, folder_type: str | None) -> tuple[str, str | None]:
    """ComfyUI's annotated names: `name.png [input]` names the folder itself."""
    for suffix, kind in _ANNOTATIONS.items():
        if filename.endswith(suffix):
            return filename[: -len(suffix)], kind
    return filename, folder_type


# -- /view -------------------------------------------------------------------------------------
def _render_variant(path: Path, preview: str | None, channel: str) -> tuple[bytes, str] | None:
    """Re-encode an image for `preview=webp;90|jpeg;90` or `channel=rgb|a`; None = send as is."""
    if not preview and channel == "rgba":
        return None
    from PIL import Image

    try:
        with Image.open(path) as img:
            img.load()
    except (OSError, ValueError) as exc:  # UnidentifiedImageError is an OSError
        raise FileRequestError(400, f"{path.name} is not a readable image, so preview/channel cannot apply: {exc}") \
            from None
    if channel == "rgb":
        img = img.convert("RGB")
    elif channel == "a":
        alpha = img.getchannel("A") if "A" in img.getbands() else Image.new("L", img.size, 255)
        img = Image.new("RGBA", img.size)
        img.putalpha(alpha)
    buf = io.BytesIO()
    if preview:
        fmt, _, quality = preview.partition(";")
        fmt = fmt.strip().lower()
        if fmt not in ("webp", "jpeg"):
            raise FileRequestError(400, f"preview format must be webp or jpeg, got {fmt!r}")
        try:
            q = int(quality) if quality else 90
        except ValueError:
            raise FileRequestError(400, f"preview quality must be an integer, got {quality!r}") from None
        if fmt == "jpeg":
            img = img.convert("RGB")
        img.save(buf, format=fmt.upper(), quality=max(1, min(q, 100)))
        return buf.getvalue(), f"image/{fmt}"
    img.save(buf, format="PNG")
    return buf.getvalue(), "image/png"


async def view(request: web.Request) -> web.StreamResponse:
    state = state_of(request)
    q = request.query
    if "filename" not in q:
        return json_error(400, "query parameter 'filename' is required")
    filename, folder_type = split_annotation(q["filename"], q.get("type") or "output")
    channel = q.get("channel", "rgba")
    if channel not in ("rgba", "rgb", "a"):
        return json_error(400, f"channel must be rgba, rgb or a, got {channel!r}")
    download_name, asset_type = None, None
    try:
        if q["filename"].startswith("blake3:"):
            # The editor's LoadImage widget may hold an asset hash (assets API on): the file is
            # found by its content hash (web/assets.py), as today's ComfyUI /view does.
            path, download_name, asset_type = await _asset_by_hash(request, q["filename"])
            if not may_read_path(request, path):  # --users: stored content is its owner's
                return json_error(404, f"file {filename!r} not found")
        else:
            path = resolve_file(state, folder_type or "output", q.get("subfolder", ""), filename)
            if not may_read_file(request, folder_type or "output", q.get("subfolder", ""), filename):
                # --users (web/auth/): another user's file reads as absent (no name oracle)
                return json_error(404, f"file {filename!r} not found in {folder_type}")
        if not path.is_file():
            return json_error(404, f"file {filename!r} not found in {folder_type}")
        variant = await asyncio.to_thread(_render_variant, path, q.get("preview"), channel) \
            if _is_image(path) else None
    except FileRequestError as exc:
        return json_error(exc.status, str(exc))
    shown_name = download_name or path.name
    headers = {"Content-Disposition": f'inline; filename="{_header_safe(shown_name)}"',
               "X-Content-Type-Options": "nosniff"}
    if variant is not None:
        data, content_type = variant
        return web.Response(body=data, content_type=content_type, headers=headers)
    # Video and audio types from a fixed table (the browser's <video>/<audio> pick a decoder from
    # it); aiohttp's FileResponse answers `Range: bytes=a-b` with 206 and Content-Range, which
    # the video element needs to seek and to read an MP4's index at the end of the file.
    content_type = asset_type or media_type(path.name) or "application/octet-stream"
    if is_active_type(content_type):
        content_type = "application/octet-stream"
        headers["Content-Disposition"] = f'attachment; filename="{_header_safe(shown_name)}"'
    headers["Content-Type"] = content_type
    return web.FileResponse(path, headers=headers)


async def _asset_by_hash(request: web.Request, text: str) -> tuple[Path, str, str | None]:
    """(file, name, MIME type) of stored content with this `blake3:<hex>` hash; 404 when the
    assets API is off or nothing usable has the hash (ComfyUI's answers), 400 for a malformed one."""
    service = asset_service(request.app)
    if service is None:
        raise FileRequestError(404, "a blake3: file name needs the assets API (--enable-assets)")
    try:
        digest = parse_hash(text)
    except AssetError as exc:
        raise FileRequestError(400, f"filename: {exc.message}") from None
    found = await asyncio.to_thread(service.catalog.resolve_hash, digest)
    if found is None:
        raise FileRequestError(404, f"no stored file has the hash {digest}")
    path, name, mime = found
    return path, name, (mime.split(";", 1)[0].strip() if mime else None)


def _is_image(path: Path) -> bool:
    return path.suffix.lower() in (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")


def _header_safe(name: str) -> str:
    return name.replace("\\", "_").replace('"', "_")


# -- uploads -----------------------------------------------------------------------------------
def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def store_upload(state: AppState, folder_type: str, subfolder: str, filename: str, data: bytes,
                 overwrite: bool) -> dict:
    """Write an upload; returns ComfyUI's `{name, subfolder, type}`.

    Without `overwrite`, a same-named file with the same content is reused, and a different one
    makes the new upload `name (1).ext`, `name (2).ext`, ...
    """
    path = resolve_file(state, folder_type, subfolder, filename)
    if path.exists() and not overwrite:
        if path.is_file() and _sha256(path.read_bytes()) == _sha256(data):
            return {"name": path.name, "subfolder": subfolder, "type": folder_type}
        stem, ext = os.path.splitext(filename)
        n = 1
        while True:
            candidate = resolve_file(state, folder_type, subfolder, f"{stem} ({n}){ext}")
            if not candidate.exists():
                path = candidate
                break
            if candidate.is_file() and _sha256(candidate.read_bytes()) == _sha256(data):
                return {"name": candidate.name, "subfolder": subfolder, "type": folder_type}
            n += 1
    _write_atomic(path, data)
    return {"name": path.name, "subfolder": subfolder, "type": folder_type}


async def _read_upload(request: web.Request) -> tuple[dict[str, Any], FileField]:
    if not request.content_type.startswith("multipart/"):
        raise FileRequestError(400, f"expected a multipart/form-data body, got {request.content_type!r}")
    try:
        form = await request.post()
    except (ValueError, HttpProcessingError) as exc:
        raise FileRequestError(400, f"malformed multipart body: {exc}") from None
    image = form.get("image")
    if not isinstance(image, FileField):
        raise FileRequestError(400, "multipart field 'image' (a file) is required")
    return dict(form), image


def _mask_onto(original: Path, mask_data: bytes) -> bytes:
    """The original image with its alpha channel replaced by the uploaded mask's alpha, as PNG
    (text chunks kept, so a workflow embedded in the original survives)."""
    from PIL import Image, PngImagePlugin

    with Image.open(original) as src:
        src.load()
        info = dict(src.info)
    with Image.open(io.BytesIO(mask_data)) as mask:
        mask.load()
    alpha = mask.getchannel("A") if "A" in mask.getbands() else mask.convert("L")
    if alpha.size != src.size:
        alpha = alpha.resize(src.size, Image.Resampling.LANCZOS)
    out = src.convert("RGBA")
    out.putalpha(alpha)
    meta = PngImagePlugin.PngInfo()
    for key, value in info.items():
        if isinstance(value, str):
            meta.add_text(key, value)
    buf = io.BytesIO()
    out.save(buf, format="PNG", pnginfo=meta, compress_level=4)
    return buf.getvalue()


async def upload(request: web.Request, *, mask: bool) -> web.Response:
    state = state_of(request)
    try:
        form, image = await _read_upload(request)
        folder_type = str(form.get("type") or "input")
        subfolder = str(form.get("subfolder") or "")
        name = check_file_name((image.filename or "").strip(), "upload file name")
        data = image.file.read()
        if mask:
            raw_ref = form.get("original_ref")
            try:
                ref = json.loads(str(raw_ref)) if raw_ref is not None else None
            except ValueError:
                ref = None
            if not isinstance(ref, dict) or not isinstance(ref.get("filename"), str):
                raise FileRequestError(400, "'original_ref' must be JSON {\"filename\", \"subfolder\", \"type\"}")
            ref_name, ref_type = split_annotation(ref["filename"], str(ref.get("type") or "output"))
            original = resolve_file(state, ref_type or "output", str(ref.get("subfolder") or ""), ref_name)
            if not original.is_file() or not may_read_file(request, ref_type or "output",
                                                            str(ref.get("subfolder") or ""), ref_name):
                raise FileRequestError(404, f"original image {ref_name!r} not found")
            try:
                data = await asyncio.to_thread(_mask_onto, original, data)
            except OSError as exc:
                raise FileRequestError(400, f"not an image: {exc}") from None
        overwrite = _truthy(form.get("overwrite", ""))
        user, auth = current_user(request), auth_of(request)
        if user is not None and overwrite and not user.is_admin \
                and resolve_file(state, folder_type, subfolder, name).exists() \
                and user.name not in auth.store.file_owners(folder_type, subfolder, name):
            raise FileRequestError(403, f"{name!r} exists and is not yours to overwrite")
        result = await asyncio.to_thread(store_upload, state, folder_type, subfolder, name, data, overwrite)
        if user is not None:  # --users: the uploader may /view it; other users may not
            auth.store.record_files([(folder_type, subfolder, result["name"], user.name)])
        asset = await _register_asset(request, folder_type, subfolder, result["name"])
    except FileRequestError as exc:
        return json_error(exc.status, str(exc))
    if asset is not None:
        result["asset"] = asset
    return web.json_response(result)


async def _register_asset(request: web.Request, folder_type: str, subfolder: str, name: str) -> dict | None:
    """With the assets API on, a record for the file just stored, in ComfyUI's `/upload/image`
    shape `{id, name, asset_hash, size, mime_type, tags}` (web/assets.py register_in_place)."""
    service = asset_service(request.app)
    if service is None:
        return None
    path = resolve_file(state_of(request), folder_type, subfolder, name)
    record = await asyncio.to_thread(service.catalog.register_in_place, path, name)
    return {"id": record.id, "name": record.name, "asset_hash": record.hash, "size": record.size,
            "mime_type": record.mime_type, "tags": record.tags}


def file_routes() -> web.RouteTableDef:
    routes = web.RouteTableDef()
    routes.get("/view")(view)

    @routes.post("/upload/image")
    async def upload_image(request: web.Request) -> web.Response:
        return await upload(request, mask=False)

    @routes.post("/upload/mask")
    async def upload_mask(request: web.Request) -> web.Response:
        return await upload(request, mask=True)

    return routes
