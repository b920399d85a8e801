"""The workflow a file carries: a JSON file, or an image, video or audio file saved with its
prompt and workflow embedded, as ComfyUI's save nodes (and ours) write them:

- PNG (SaveImage): `tEXt` chunks `prompt` and `workflow` (also `iTXt` / `zTXt`), and the `comf`
  chunks SaveAnimatedPNG writes (`<key>\\0<json>`);
- WebP (SaveAnimatedWEBP, SaveImage in WebP by packs): EXIF strings `<key>:<json>`, tag 0x0110
  for `prompt`, 0x010F downwards for the `extra_pnginfo` keys (`workflow`);
- MP4 / WebM / MOV / MKV (SaveVideo, SaveWEBM) and audio (SaveAudio: FLAC, MP3, Opus): container
  tags `prompt` / `workflow`, each JSON-encoded.

`read_embedded(path)` answers `{"prompt": ..., "workflow": ...}` (what the file holds);
`EmbeddedWorkflowError` says why none can be read. Pillow and PyAV load only for such files.
"""
from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
KEYS = ("prompt", "workflow")


class EmbeddedWorkflowError(ValueError):
    """The file is a media file without a readable embedded workflow."""


def sniff(head: bytes) -> str | None:
    """"png", "webp", "av" (a container PyAV reads) or None (text, perhaps JSON) from a file's
    first bytes."""
    if head.startswith(PNG_SIGNATURE):
        return "png"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[4:8] == b"ftyp" or head[:4] in (b"\x1a\x45\xdf\xa3", b"fLaC", b"OggS") or head[:3] == b"ID3" \
            or head[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "av"
    if head[:3] == b"\xff\xd8\xff" or head[:4] in (b"GIF8", b"II*\x00", b"MM\x00*") or head[:2] == b"BM":
        return "image"
    return None


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        try:
            return json.loads(value.strip("\x00"))
        except ValueError:
            return None
    return None


def png_texts(data: bytes) -> dict[str, str]:
    """The text chunks of a PNG (`tEXt`, `zTXt`, `iTXt`, and ComfyUI's APNG `comf`)."""
    texts: dict[str, str] = {}
    offset = len(PNG_SIGNATURE)
    while offset + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        body = data[offset + 8:offset + 8 + length]
        offset += 12 + length
        if kind == b"IEND":
            break
        if kind not in (b"tEXt", b"zTXt", b"iTXt", b"comf") or b"\0" not in body:
            continue
        key, rest = body.split(b"\0", 1)
        try:
            if kind in (b"tEXt", b"comf"):
                text = rest.decode("latin-1")
            elif kind == b"zTXt":
                text = zlib.decompress(rest[1:]).decode("latin-1")
            else:  # iTXt: compression flag, method, language\0, translated keyword\0, text
                compressed, rest = rest[0], rest[2:]
                _language, _translated, text_bytes = rest.split(b"\0", 2)
                text = (zlib.decompress(text_bytes) if compressed else text_bytes).decode("utf-8")
        except (ValueError, zlib.error, IndexError):
            continue
        texts.setdefault(key.decode("latin-1"), text)
    return texts


def _exif_values(path: Path) -> dict[str, Any]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            exif = image.getexif()
            texts = {k: v for k, v in (image.info or {}).items() if isinstance(k, str) and isinstance(v, (str, bytes))}
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        raise EmbeddedWorkflowError(f"cannot read {path}: {exc}") from None
    found: dict[str, Any] = {}
    for value in exif.values():
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, str) and ":" in value:
            key, text = value.split(":", 1)
            if key in KEYS and key not in found:
                found[key] = _decode(text)
    for key in KEYS:  # a few writers use plain text fields instead
        if key not in found and key in texts:
            found[key] = _decode(texts[key])
    return found


def _container_tags(path: Path) -> dict[str, Any]:
    try:
        import av
    except ImportError:  # pragma: no cover - PyAV is a dependency
        raise EmbeddedWorkflowError(f"reading workflows from {path.suffix or 'media'} files needs PyAV") from None
    try:
        with av.open(str(path)) as container:
            tags = {str(k).lower(): v for k, v in (container.metadata or {}).items()}
            for stream in container.streams:
                for k, v in (stream.metadata or {}).items():
                    tags.setdefault(str(k).lower(), v)
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        raise EmbeddedWorkflowError(f"cannot read {path}: {exc}") from None
    return {key: _decode(tags[key]) for key in KEYS if key in tags}


def read_embedded(path: Path) -> dict[str, Any]:
    """`{"prompt": ..., "workflow": ...}` embedded in the media file `path` (keys present only when
    the file holds them as JSON objects); `EmbeddedWorkflowError` when it holds neither."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            head = handle.read(16)
        kind = sniff(head)
        data = path.read_bytes() if kind == "png" else b""
    except OSError as exc:
        raise EmbeddedWorkflowError(f"cannot read {path}: {exc.strerror or exc}") from None
    if kind == "png":
        texts = png_texts(data)
        found = {key: _decode(texts[key]) for key in KEYS if key in texts}
    elif kind in ("webp", "image"):
        found = _exif_values(path)
    elif kind == "av":
        found = _container_tags(path)
    else:
        raise EmbeddedWorkflowError(f"{path} is neither JSON nor an image, video or audio file with a workflow")
    found = {key: value for key, value in found.items() if isinstance(value, dict) and value}
    if not found:
        raise EmbeddedWorkflowError(
            f"{path} carries no workflow: it was saved without metadata (--disable-metadata, or by another "
            "program), or its metadata was stripped")
    return found
