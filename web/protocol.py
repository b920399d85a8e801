"""WebSocket wire formats: JSON messages and ComfyUI's binary frames (pure functions).

Binary frame = `[uint32 BE event type][payload]` (ComfyUI `protocol.py: BinaryEventTypes`):
  1 PREVIEW_IMAGE                `[uint32 BE format: 1 JPEG, 2 PNG][image bytes]`
  3 TEXT                         `[uint32 BE len(node_id)][node_id][utf-8 text]`
  4 PREVIEW_IMAGE_WITH_METADATA  `[uint32 BE len(json)][json utf-8][image bytes]`, json =
    {node_id, prompt_id, display_node_id, parent_node_id, real_node_id, image_type (MIME)}
"""
from __future__ import annotations

import io
import json
import math
import struct
from typing import Any

PREVIEW_IMAGE = 1
TEXT = 3
PREVIEW_IMAGE_WITH_METADATA = 4

_FORMAT_CODES = {"JPEG": 1, "PNG": 2}
_MIME = {"JPEG": "image/jpeg", "PNG": "image/png"}
JPEG_QUALITY = 95  # ComfyUI's preview quality


class PreviewFormatError(ValueError):
    """A preview asked for an image format other than JPEG or PNG."""


def _json_default(value: Any) -> Any:
    return str(value)


def _clean(value: Any) -> Any:
    # JSON has no NaN/Infinity; browsers' JSON.parse rejects them, so send null instead.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def json_message(event_type: str, data: Any) -> str:
    """`{"type": event_type, "data": data}` as strict JSON (non-JSON values become strings)."""
    return json.dumps({"type": event_type, "data": _clean(data)}, default=_json_default, allow_nan=False)


def json_message_chunked(event_type: str, data: dict, key: str = "nodes", chunk: int = 500) -> str:
    """`json_message(event_type, data)`, the same text, with the mapping `data[key]` encoded
    `chunk` entries at a time: run in a worker thread, each piece is a short C call, so the GIL
    goes back to the event loop between pieces instead of being held for a whole 100 000-node
    `progress_state` map (issue 34)."""
    fields = []
    for name, value in data.items():
        if name == key and isinstance(value, dict):
            items = list(value.items())
            pieces = []
            for start in range(0, len(items), chunk):
                piece = dict(items[start:start + chunk])
                try:  # the walk of `_clean` only when the piece has a NaN or an infinity
                    text = json.dumps(piece, default=_json_default, allow_nan=False)
                except ValueError:
                    text = json.dumps(_clean(piece), default=_json_default, allow_nan=False)
                pieces.append(text[1:-1])
            encoded = "{" + ", ".join(pieces) + "}"
        else:
            encoded = json.dumps(_clean(value), default=_json_default, allow_nan=False)
        fields.append(f"{json.dumps(str(name))}: {encoded}")
    return f'{{"type": {json.dumps(event_type)}, "data": {{{", ".join(fields)}}}}}'


def binary_frame(event_type: int, payload: bytes) -> bytes:
    return struct.pack(">I", event_type) + payload


def encode_image(image: Any, fmt: str, max_size: int | None) -> bytes:
    """Encode a PIL image as JPEG or PNG, scaled to fit `max_size` (aspect kept) when given:
    shrunk or enlarged (an 8x8 latent2rgb preview becomes 512x512), bilinear, as ComfyUI's
    server.py `send_image` does with `ImageOps.contain`."""
    from PIL import Image, ImageOps  # Pillow is only needed once a preview is sent

    fmt = fmt.upper()
    if fmt not in _FORMAT_CODES:
        raise PreviewFormatError(f"preview format must be JPEG or PNG, got {fmt!r}")
    if max_size is not None:
        image = ImageOps.contain(image, (max_size, max_size), Image.Resampling.BILINEAR)
    buf = io.BytesIO()
    if fmt == "JPEG":
        image.convert("RGB").save(buf, format="JPEG", quality=JPEG_QUALITY)
    else:
        image.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def preview_frame(image_bytes: bytes, fmt: str) -> bytes:
    """Type 1: the legacy preview frame, understood by every client."""
    return binary_frame(PREVIEW_IMAGE, struct.pack(">I", _FORMAT_CODES[fmt.upper()]) + image_bytes)


def preview_frame_with_metadata(image_bytes: bytes, fmt: str, meta: dict) -> bytes:
    """Type 4: preview plus which node/prompt it belongs to (clients with supports_preview_metadata)."""
    header = json.dumps({
        "node_id": meta.get("node_id"),
        "prompt_id": meta.get("prompt_id"),
        "display_node_id": meta.get("display_node_id", meta.get("node_id")),
        "parent_node_id": meta.get("parent_node_id"),
        "real_node_id": meta.get("real_node_id", meta.get("node_id")),
        "image_type": _MIME[fmt.upper()],
    }).encode("utf-8")
    return binary_frame(PREVIEW_IMAGE_WITH_METADATA, struct.pack(">I", len(header)) + header + image_bytes)


def text_frame(node_id: str, text: str) -> bytes:
    node = node_id.encode("utf-8")
    return binary_frame(TEXT, struct.pack(">I", len(node)) + node + text.encode("utf-8"))


def parse_binary_frame(frame: bytes) -> tuple[int, Any]:
    """Decode a frame (tests and clients): type 1 -> (1, (format_code, image bytes)),
    type 4 -> (4, (meta dict, image bytes)), type 3 -> (3, (node_id, text)), else raw payload."""
    (event_type,) = struct.unpack(">I", frame[:4])
    payload = frame[4:]
    if event_type == PREVIEW_IMAGE:
        return event_type, (struct.unpack(">I", payload[:4])[0], payload[4:])
    if event_type == PREVIEW_IMAGE_WITH_METADATA:
        (n,) = struct.unpack(">I", payload[:4])
        return event_type, (json.loads(payload[4:4 + n]), payload[4 + n:])
    if event_type == TEXT:
        (n,) = struct.unpack(">I", payload[:4])
        return event_type, (payload[4:4 + n].decode("utf-8"), payload[4 + n:].decode("utf-8"))
    return event_type, payload
