"""The media type of a file name, for the video and audio files the nodes list and the server
sends (`/view`): a fixed table for the formats ComfyUI's nodes write and read, then Python's
`mimetypes` (non-strict, as ComfyUI's `filter_files_content_types`).

Why a table: `mimetypes` reads the host's mime.types, so `.opus` or `.flac` may be unknown or
differ from one machine to the next, and the browser's `<video>` / `<audio>` elements pick their
decoder from this header.
"""
from __future__ import annotations

import mimetypes
from pathlib import PurePath

MEDIA_TYPES = {
    ".mp4": "video/mp4", ".m4v": "video/mp4", ".webm": "video/webm", ".mkv": "video/x-matroska",
    ".mov": "video/quicktime", ".avi": "video/x-msvideo",
    ".gif": "image/gif", ".webp": "image/webp", ".png": "image/png", ".apng": "image/apng",
    ".mp3": "audio/mpeg", ".flac": "audio/flac", ".opus": "audio/ogg", ".ogg": "audio/ogg",
    ".wav": "audio/wav", ".m4a": "audio/mp4", ".aac": "audio/aac",
}


def media_type(name: str) -> str | None:
    """`"video/mp4"` for `"clip.mp4"`; None when nothing is known about the extension."""
    known = MEDIA_TYPES.get(PurePath(name).suffix.lower())
    return known or mimetypes.guess_type(name, strict=False)[0]


def content_kind(name: str) -> str | None:
    """The top-level type (`"video"`, `"audio"`, `"image"`) of a file name."""
    found = media_type(name)
    return found.split("/", 1)[0] if found else None
