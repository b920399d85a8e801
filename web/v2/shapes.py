"""The wire shapes of Comfy's API v2 (comfy-sdk 0.5.0 `comfy_low/models/_generated.py`; the
labels rules from its README): the error envelope, times, job statuses, outputs and labels.

Times are ISO 8601 with a UTC offset. The contract makes `expires_at` (a job's retention) and
`url_expires_at` (a content link's validity) required; this server keeps history by count
(`--max-history`-style trimming in web/store.py), never by time, and its content links do not
expire, so both carry `NO_EXPIRY` (the largest date), never an invented deadline.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping

from aiohttp import web

NO_EXPIRY = "9999-12-31T23:59:59+00:00"
STATUSES = ("queued", "running", "succeeded", "canceling", "canceled", "failed", "expired")
TERMINAL = frozenset({"succeeded", "canceled", "failed", "expired"})
# History status -> v2 status (an interrupted run is `canceled`, as the proxy reports it).
FINISHED_STATUS = {"success": "succeeded", "error": "failed", "interrupted": "canceled"}
# A UI output's list name -> the v2 output kind (anything else that names files is `file`).
OUTPUT_KINDS = {"images": "image", "gifs": "video", "video": "video", "videos": "video", "animated": "image",
                "audio": "audio", "text": "text", "latents": "latent", "latent": "latent"}

MAX_LABELS = 16
MAX_LABEL_KEY = 40
MAX_LABEL_VALUE_BYTES = 256
MAX_LABEL_FILTERS = 3
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")


def error(status: int, code: str, message: str, headers: Mapping[str, str] | None = None,
          **details: Any) -> web.Response:
    """The v2 error envelope `{"error": {"code", "message", "details"}}` (details null when none)."""
    return web.json_response({"error": {"code": code, "message": message, "details": details or None}},
                             status=status, headers=headers)


def iso_ms(ms: int | None) -> str | None:
    """Milliseconds since the epoch as ISO 8601 UTC, or None."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


def iso_text(text: str | None) -> str | None:
    """The asset catalogue's naive UTC text (web/asset_files.now_text) with its offset."""
    if not text:
        return None
    return text + "+00:00" if "+" not in text and not text.endswith("Z") else text


def _bad_char(text: str) -> bool:
    for ch in text:
        code = ord(ch)
        if code <= 0x1F or 0x7F <= code <= 0x9F or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069:
            return True
    return False


def label_key_problem(key: Any) -> str | None:
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_LABEL_KEY or not set(key) <= _KEY_CHARS:
        return (f"label key {str(key)[:60]!r} must be 1 to {MAX_LABEL_KEY} characters from "
                "A-Z a-z 0-9 _ - .")
    return None


def label_value_problem(key: str, value: Any) -> str | None:
    if not isinstance(value, str):
        return f"label {key!r} must have a string value, got {type(value).__name__}"
    if len(value.encode("utf-8")) > MAX_LABEL_VALUE_BYTES:
        return f"label {key!r} has a value longer than {MAX_LABEL_VALUE_BYTES} bytes in UTF-8"
    if _bad_char(value):
        return f"label {key!r} has a control or bidirectional formatting character in its value"
    return None


def check_labels(raw: Any) -> tuple[dict[str, str], str | None]:
    """(labels, None) for a valid `metadata` map (absent: {}), else ({}, the problem)."""
    if raw is None:
        return {}, None
    if not isinstance(raw, dict):
        return {}, f"'metadata' must be an object of string labels, got {type(raw).__name__}"
    if len(raw) > MAX_LABELS:
        return {}, f"'metadata' has {len(raw)} labels; at most {MAX_LABELS} are allowed"
    for key, value in raw.items():
        problem = label_key_problem(key) or label_value_problem(key, value)
        if problem:
            return {}, problem
    return dict(raw), None


def output_kind(list_name: str) -> str:
    return OUTPUT_KINDS.get(list_name, "file")


def content_url(base: str, asset_id: str) -> str:
    return f"{base}/api/v2/assets/{asset_id}/content"


def job_urls(job_id: str) -> dict[str, str]:
    """Host-relative follow-up links (the contract allows them; clients resolve them against the
    origin they asked), so no Host header is trusted to build them."""
    path = f"/api/v2/jobs/{job_id}"
    return {"self": path, "events": f"{path}/events", "cancel": f"{path}/cancel"}


def external_base(request: web.Request) -> str:
    """The origin the client reached us on: output and asset `url`s must be absolute URLs."""
    return f"{request.scheme}://{request.host}"
