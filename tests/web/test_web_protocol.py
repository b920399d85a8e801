"""Binary frame formats (ComfyUI protocol.py) and strict JSON messages."""
from __future__ import annotations

import json
import struct

import pytest
from PIL import Image

from web import protocol


def test_type1_frame_layout():
    frame = protocol.preview_frame(b"IMG", "PNG")
    assert frame[:4] == struct.pack(">I", 1) and frame[4:8] == struct.pack(">I", 2) and frame[8:] == b"IMG"
    assert protocol.parse_binary_frame(frame) == (1, (2, b"IMG"))


def test_type4_frame_has_metadata_header():
    frame = protocol.preview_frame_with_metadata(b"JJ", "JPEG", {"node_id": "5", "prompt_id": "p",
                                                                  "parent_node_id": None})
    kind, (meta, image) = protocol.parse_binary_frame(frame)
    assert kind == 4 and image == b"JJ"
    assert meta == {"node_id": "5", "prompt_id": "p", "display_node_id": "5", "parent_node_id": None,
                    "real_node_id": "5", "image_type": "image/jpeg"}
    (n,) = struct.unpack(">I", frame[4:8])
    assert json.loads(frame[8:8 + n]) == meta


def test_text_frame():
    assert protocol.parse_binary_frame(protocol.text_frame("7", "héllo")) == (3, ("7", "héllo"))


def test_encode_image_fits_max_size_and_checks_format():
    data = protocol.encode_image(Image.new("RGB", (100, 50)), "JPEG", 20)
    import io
    assert Image.open(io.BytesIO(data)).size == (20, 10)
    full = protocol.encode_image(Image.new("RGBA", (30, 10)), "PNG", None)
    assert Image.open(io.BytesIO(full)).size == (30, 10)
    with pytest.raises(protocol.PreviewFormatError):
        protocol.encode_image(Image.new("RGB", (1, 1)), "GIF", None)


def test_json_message_is_strict_json():
    text = protocol.json_message("progress", {"value": float("nan"), "path": object(), "n": [1, float("inf")]})
    data = json.loads(text)
    assert data["type"] == "progress" and data["data"]["value"] is None and data["data"]["n"] == [1, None]
    assert isinstance(data["data"]["path"], str)
