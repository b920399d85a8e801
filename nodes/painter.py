"""Painter of ComfyUI's comfy_extras/nodes_painter.py (2026), declared as ComfyUI's V3 schema
renders it (graph/v3_schema.py); behaviour read from that file, written here.

The editor's painter widget uploads the strokes as an RGBA image and puts its name in `mask`
(`"painter/x.png [temp]"`, as LoadImage's names). The node composites the strokes over the first
base image, or over a `width` x `height` canvas of `bg_color` when no image is linked (the
strokes image resized with Lanczos when the sizes differ), and outputs that image and the
strokes' alpha as the MASK, with a preview. An empty `mask` means no strokes: the base as it is and
an empty mask. The node re-runs when the strokes file changes (its SHA-256).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from comfy_core.image.png import preview_target, save_images
from graph.context import current
from graph.v3_schema import Int, Output, Socket, String, Widget, v3_node
from nodes.environment import Environment, current_env
from nodes.errors import NodeInputError, describe
from nodes.image import annotated_path, file_sha256
from nodes.image_crop import _hex_rgb


def _canvas_size(name: str) -> Any:
    return Int(name, default=512, min=64, max=4096, step=64, socketless=True, hidden=True)


def painter_fingerprint(mask: Any = "", **_: Any) -> str:
    """The strokes file's SHA-256 ("" without strokes or a readable file)."""
    ctx = current()
    if not isinstance(mask, str) or not mask.strip() or ctx is None or not isinstance(ctx.env, Environment):
        return ""
    try:
        path = annotated_path(ctx.env, mask, input_name="mask")
    except NodeInputError:
        return ""
    return file_sha256(path) if path.is_file() else ""


@v3_node("Painter", display_name="Painter", category="image", python_module="comfy_extras.nodes_painter",
         inputs=[Socket("image", "IMAGE", optional=True, tooltip="Optional base image to paint over"),
                 String("mask", default="", socketless=True, widgetType="PAINTER", image_upload=True),
                 _canvas_size("width"), _canvas_size("height"),
                 Widget("bg_color", "COLOR", default="#000000")],
         outputs=[Output("IMAGE", "IMAGE"), Output("MASK", "MASK")],
         is_changed=painter_fingerprint)
def painter(mask: str, width: int, height: int, bg_color: str = "#000000", image: Any = None) -> dict:
    import numpy as np
    import torch
    from PIL import Image

    if image is not None:
        if not isinstance(image, torch.Tensor) or image.ndim != 4:
            raise NodeInputError("image", "an IMAGE [B,H,W,C]", describe(image))
        base = image[:1, ..., :3].float()
    else:
        base = torch.empty(1, height, width, 3)
        base[...] = torch.tensor(_hex_rgb(bg_color if bg_color is not None else "#000000"))
    h, w = int(base.shape[1]), int(base.shape[2])
    env = current_env()
    if isinstance(mask, str) and mask.strip():
        path = annotated_path(env, mask, input_name="mask")
        if not path.is_file():
            raise NodeInputError("mask", "the name of an uploaded painting", repr(mask))
        with Image.open(path) as opened:
            strokes = opened.convert("RGBA")
        if strokes.size != (w, h):
            strokes = strokes.resize((w, h), Image.Resampling.LANCZOS)
        rgba = torch.from_numpy(np.asarray(strokes).astype(np.float32) / 255.0)  # [H, W, 4]
        alpha = rgba[..., 3:4]
        out = (rgba[..., :3] * alpha + base[0] * (1.0 - alpha)).unsqueeze(0)
        out_mask = rgba[..., 3].unsqueeze(0)
    else:
        out, out_mask = base, torch.zeros(1, h, w)
    target = preview_target(env.temp_dir)
    previews = save_images(out, Path(target.output_dir), "ComfyUI" + target.prefix_append, folder_type=target.type,
                           compress_level=target.compress_level, metadata=False)
    return {"result": (out, out_mask), "ui": {"images": previews}}
