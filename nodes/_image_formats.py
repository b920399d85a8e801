"""Still-image encoders of SaveImageAdvanced (nodes/save_image_advanced.py): PNG (8 or 16 bits per
channel), OpenEXR (32-bit float, scene-linear) and AVIF (SVT-AV1, still or animated), with
ComfyUI's metadata: the API prompt and each `extra_pnginfo` entry (the editor's `workflow`) as
JSON text, in PNG `tEXt` chunks and EXR `string` header attributes, plus the EXR
`chromaticities` of the input's gamut.

Encoding goes through PyAV's codecs (`png`, `exr`, `libsvtav1`), as today's ComfyUI does, so the
files are read back by the same tools; the metadata is written here by editing the encoded bytes
(PNG chunk layout: ISO/IEC 15948 §5; EXR header and offset table: the OpenEXR file layout).
Colour transforms (EXR wants scene-linear light): the inverse sRGB EOTF (IEC 61966-2-1) and the
inverse HLG OETF (ITU-R BT.2100, Table 5 constants).

A private module: `nodes/__init__.py` registers no node from files starting with `_`.
"""
from __future__ import annotations

import json
import struct
import zlib
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from comfy_core.video.encode import check_svt_av1_width
from comfy_core.video.errors import VideoEncodingError

if TYPE_CHECKING:
    import torch

PNG_DEPTHS = ("8-bit", "16-bit")
EXR_DEPTHS = ("32-bit float",)
AVIF_DEPTHS = ("auto", "8-bit YUV420", "10-bit YUV420")

# (format, depth) -> per channel count: (numpy dtype name, frame pixel format, codec pixel format)
_PIXEL_FORMATS = {
    ("png", "8-bit"): {1: ("uint8", "gray", "gray"), 3: ("uint8", "rgb24", "rgb24"), 4: ("uint8", "rgba", "rgba")},
    ("png", "16-bit"): {1: ("uint16", "gray16le", "gray16be"), 3: ("uint16", "rgb48le", "rgb48be"),
                        4: ("uint16", "rgba64le", "rgba64be")},
    ("exr", "32-bit float"): {1: ("float32", "grayf32le", "grayf32le"), 3: ("float32", "gbrpf32le", "gbrpf32le"),
                              4: ("float32", "gbrapf32le", "gbrapf32le")},
}

# CIE 1931 xy of R, G, B and the D65 white point.
_REC709 = (0.6400, 0.3300, 0.3000, 0.6000, 0.1500, 0.0600, 0.3127, 0.3290)
_REC2020 = (0.7080, 0.2920, 0.1700, 0.7970, 0.1310, 0.0460, 0.3127, 0.3290)
_EXR_GAMUT = {"sRGB": _REC709, "linear": _REC709, "HDR": _REC2020}

# BT.2100 HLG constants.
_HLG_A = 0.17883277
_HLG_B = 0.28466892
_HLG_C = 0.55991072928


class EncodeError(ValueError):
    """An image the chosen format cannot hold (channel count, depth)."""


def srgb_to_linear(t: "torch.Tensor") -> "torch.Tensor":
    """Inverse sRGB EOTF on the colour channels; a 4th (alpha) channel passes unchanged."""
    import torch

    if t.shape[-1] == 4:
        return torch.cat([srgb_to_linear(t[..., :3]), t[..., 3:]], dim=-1)
    return torch.where(t <= 0.04045, t / 12.92, ((t.clamp(min=0.0) + 0.055) / 1.055) ** 2.4)


def hlg_to_linear(t: "torch.Tensor") -> "torch.Tensor":
    """Inverse HLG OETF (scene light, BT.2100 note 5a); alpha passes unchanged. The log branch
    reads its input clamped at the branch point so the unused lane stays finite."""
    import torch

    if t.shape[-1] == 4:
        return torch.cat([hlg_to_linear(t[..., :3]), t[..., 3:]], dim=-1)
    low = t * t / 3.0
    high = (torch.exp((t.clamp(min=0.5) - _HLG_C) / _HLG_A) + _HLG_B) / 12.0
    return torch.where(t <= 0.5, low, high)


def _channels_last(image: "torch.Tensor") -> "torch.Tensor":
    return image.unsqueeze(-1) if image.ndim == 2 else image  # a mask-like [H, W] is greyscale


def encode_still(image: "torch.Tensor", file_format: str, depth: str, colorspace: str) -> bytes:
    """One image `[H, W, C]` (C in 1, 3, 4) as PNG or EXR file bytes (no metadata)."""
    import av
    import numpy as np
    import torch

    image = _channels_last(image).detach().cpu().float()
    height, width, channels = image.shape
    formats = _PIXEL_FORMATS.get((file_format, depth))
    if formats is None:
        raise EncodeError(f"no {file_format} encoder for {depth!r}")
    if channels not in formats:
        raise EncodeError(f"{file_format} {depth} holds 1 (grey), 3 (RGB) or 4 (RGBA) channels; the image has "
                          f"{channels}")
    dtype, frame_format, codec_format = formats[channels]
    if file_format == "exr":  # full range kept, no clamp
        if colorspace == "sRGB":
            image = srgb_to_linear(image)
        elif colorspace == "HDR":
            image = hlg_to_linear(image)
        pixels = image.numpy().astype(np.float32)
    else:
        top = 255.0 if dtype == "uint8" else 65535.0
        pixels = (image * top).clamp(0, top).to(torch.int32).numpy().astype(dtype)  # truncation, as ComfyUI
    if pixels.shape[-1] == 1 and frame_format.startswith("gray"):
        pixels = pixels[..., 0]
    codec = av.CodecContext.create(file_format, "w")
    codec.width, codec.height, codec.pix_fmt = width, height, codec_format
    codec.time_base = Fraction(1, 1)
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format=frame_format)
    if frame_format != codec_format:
        frame = frame.reformat(format=codec_format)
    frame.pts = 0
    frame.time_base = codec.time_base
    packets = list(codec.encode(frame)) + list(codec.encode(None))
    return b"".join(bytes(p) for p in packets)


# -- PNG text chunks -------------------------------------------------------------------------------

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _metadata_items(prompt: Any, extra_pnginfo: Any) -> list[tuple[str, str]]:
    items = [("prompt", json.dumps(prompt))] if prompt is not None else []
    if extra_pnginfo:
        items += [(key, json.dumps(value)) for key, value in extra_pnginfo.items()]
    return items


def png_with_text(png: bytes, prompt: Any, extra_pnginfo: Any) -> bytes:
    """`png` with a `tEXt` chunk per metadata item (Latin-1, unencodable characters replaced),
    right after the IHDR chunk."""
    items = _metadata_items(prompt, extra_pnginfo)
    if not items or not png.startswith(PNG_SIGNATURE):
        return png
    chunks = b"".join(_png_chunk(b"tEXt", key.encode("latin-1") + b"\0" + text.encode("latin-1", errors="replace"))
                      for key, text in items)
    ihdr_end = 8 + 12 + struct.unpack(">I", png[8:12])[0]  # signature, then length+type+data+crc
    return png[:ihdr_end] + chunks + png[ihdr_end:]


def png_text(png: bytes) -> dict[str, str]:
    """The `tEXt` chunks of a PNG (for tests and readers)."""
    found, pos = {}, 8
    while pos + 8 <= len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        if kind == b"tEXt":
            key, _, text = png[pos + 8:pos + 8 + length].partition(b"\0")
            found[key.decode("latin-1")] = text.decode("latin-1")
        pos += 12 + length
    return found


# -- EXR header attributes -------------------------------------------------------------------------

EXR_MAGIC = b"\x76\x2f\x31\x01"
_LINES_PER_CHUNK = {0: 1, 1: 1, 2: 1, 3: 16, 4: 32, 5: 16, 6: 32, 7: 32, 8: 32, 9: 256}


def _exr_attribute(name: str, kind: str, value: bytes) -> bytes:
    return name.encode() + b"\0" + kind.encode() + b"\0" + struct.pack("<i", len(value)) + value


def exr_attributes(exr: bytes) -> tuple[dict[str, tuple[str, bytes]], int]:
    """The header attributes `{name: (type, value bytes)}` and the offset of the header's
    terminating NUL."""
    attributes, pos = {}, 8  # magic, version
    while pos < len(exr) and exr[pos] != 0:
        name_end = exr.index(b"\0", pos)
        type_end = exr.index(b"\0", name_end + 1)
        size = struct.unpack("<i", exr[type_end + 1:type_end + 5])[0]
        start = type_end + 5
        attributes[exr[pos:name_end].decode("latin-1")] = (exr[name_end + 1:type_end].decode("latin-1"),
                                                           exr[start:start + size])
        pos = start + size
    return attributes, pos


def exr_with_metadata(exr: bytes, prompt: Any, extra_pnginfo: Any, colorspace: str | None) -> bytes:
    """`exr` (single-part scanline) with a `string` attribute per metadata item and the
    `chromaticities` of `colorspace`'s gamut; the offset table that follows the header holds
    absolute positions, so each is moved by the inserted length."""
    if len(exr) < 8 or exr[:4] != EXR_MAGIC:
        return exr
    blob = b"".join(_exr_attribute(key, "string", text.encode("utf-8"))
                    for key, text in _metadata_items(prompt, extra_pnginfo))
    if colorspace is not None:
        blob += _exr_attribute("chromaticities", "chromaticities",
                               struct.pack("<8f", *_EXR_GAMUT.get(colorspace, _REC709)))
    if not blob:
        return exr
    attributes, header_end = exr_attributes(exr)
    if "dataWindow" not in attributes:
        return exr
    _, y_min, _, y_max = struct.unpack("<iiii", attributes["dataWindow"][1])
    compression = attributes.get("compression", ("", b"\0"))[1][0]
    lines = _LINES_PER_CHUNK.get(compression, 1)
    chunks = (y_max - y_min + 1 + lines - 1) // lines
    table_start, table_end = header_end + 1, header_end + 1 + 8 * chunks
    offsets = struct.unpack(f"<{chunks}Q", exr[table_start:table_end])
    moved = struct.pack(f"<{chunks}Q", *(offset + len(blob) for offset in offsets))
    return exr[:header_end] + blob + b"\0" + moved + exr[table_end:]


# -- AVIF --------------------------------------------------------------------------------------------

def _avif_colour(colorspace: str) -> tuple[Any, Any, int]:
    from av.video.reformatter import ColorPrimaries, ColorTrc

    return {"sRGB": (ColorPrimaries.BT709, ColorTrc.IEC61966_2_1, 1),
            "HDR": (ColorPrimaries.BT2020, ColorTrc.ARIB_STD_B67, 9),
            "HDR PQ": (ColorPrimaries.BT2020, ColorTrc.SMPTE2084, 9)}[colorspace]


def _tag_colour(target: Any, colorspace: str) -> None:
    from av.video.reformatter import ColorRange

    target.color_primaries, target.color_trc, target.colorspace = _avif_colour(colorspace)
    target.color_range = ColorRange.MPEG


def write_avif(images: "torch.Tensor", path: str, depth: str, colorspace: str, crf: int, *, fps: float = 1.0,
               loop_count: int | None = None) -> None:
    """`images` `[N, H, W, C]` (C 1 or 3) as one AVIF: a still for N = 1, an image sequence
    otherwise. "auto" depth is 10-bit for the HDR colour spaces, else 8-bit."""
    import av
    import numpy as np
    import torch

    if depth == "auto":
        depth = "10-bit YUV420" if colorspace in ("HDR", "HDR PQ") else "8-bit YUV420"
    ten_bit = depth == "10-bit YUV420"
    pixel_format = "yuv420p10le" if ten_bit else "yuv420p"
    try:  # before the file is created: narrow frames corrupt SVT-AV1's memory
        check_svt_av1_width(int(images.shape[2]), "AVIF")
    except VideoEncodingError as exc:
        raise EncodeError(str(exc)) from exc
    options = {"loop": str(loop_count)} if loop_count is not None else None
    with av.open(path, mode="w", format="avif", options=options) as container:
        stream = container.add_stream("libsvtav1", rate=Fraction(round(fps * 1000), 1000))
        stream.width, stream.height, stream.pix_fmt = int(images.shape[2]), int(images.shape[1]), pixel_format
        stream.options = {"crf": str(crf), "preset": "8"}
        _tag_colour(stream.codec_context, colorspace)
        for image in images:
            image = _channels_last(image).detach().cpu().float()
            if image.shape[-1] not in (1, 3):
                raise EncodeError("AVIF holds 1 (grey) or 3 (RGB) channels (the SVT-AV1 encoder has no alpha); the "
                                  f"image has {image.shape[-1]}")
            grey = image.shape[-1] == 1
            if ten_bit:
                pixels = (image * 65535.0).clamp(0, 65535).to(torch.int32).numpy().astype(np.uint16)
                frame_format = "gray16le" if grey else "rgb48le"
            else:
                pixels = (image * 255.0).clamp(0, 255).to(torch.uint8).numpy()
                frame_format = "gray" if grey else "rgb24"
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels[..., 0] if grey else pixels),
                                               format=frame_format)
            frame = frame.reformat(format=pixel_format, dst_colorspace=_avif_colour(colorspace)[2])
            _tag_colour(frame, colorspace)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
