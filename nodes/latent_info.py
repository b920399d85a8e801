"""GetLatentSize, "Get Image/Video Latent Size" (today's ComfyUI, comfy_extras/nodes_images.py,
2026): the width, height, frame count and batch size of a LATENT, in latent units. An image
latent `[B, C, h, w]` has one frame; a video latent is `[B, C, t, h, w]`; of a nested latent
(LTX-2's `[video, audio]`) the first part is measured. Like GetImageSize, the node shows the
numbers on itself in the editor (ComfyUI's progress text, sent when the prompt names the node).
"""
from __future__ import annotations

from typing import Any

from graph.context import current
from graph.v3_schema import Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.image_batch import PROGRESS_TEXT_EVENT, progress_text_payload

MODULE = "comfy_extras.nodes_images"


def latent_size(latent: Any) -> tuple[int, int, int, int]:
    """`(width, height, frames, batch_size)` of a LATENT (see the module docstring)."""
    samples = checks.latent(latent, "latent", ndims=(4, 5), nested=True)
    if getattr(samples, "is_nested", False) is True:
        samples = samples.unbind()[0]
        if samples.ndim not in (4, 5):
            raise NodeInputError("latent", "a nested LATENT whose first part is [B, C, h, w] or [B, C, t, h, w]",
                                 describe(samples))
    if samples.ndim == 5:
        batch, _, frames, height, width = (int(n) for n in samples.shape)
    else:
        batch, _, height, width = (int(n) for n in samples.shape)
        frames = 1
    return width, height, frames, batch


@v3_node("GetLatentSize", display_name="Get Image/Video Latent Size", category="latent", python_module=MODULE,
         description="Returns the width, height, frame count, and batch size of an image or video latent.",
         search_aliases=("dimensions", "resolution", "latent info", "video latent size"),
         inputs=[Socket("latent", "LATENT", tooltip="The image or video latent to inspect.")],
         outputs=[Output("INT", "width", tooltip="The latent width."),
                  Output("INT", "height", tooltip="The latent height."),
                  Output("INT", "frames", tooltip="The latent frame count. Image latents have one frame."),
                  Output("INT", "batch_size", tooltip="The number of latents in the batch.")],
         hidden=[("unique_id", "UNIQUE_ID")])
def get_latent_size(latent: dict, unique_id: str | None = None) -> tuple[int, int, int, int]:
    width, height, frames, batch = latent_size(latent)
    ctx = current()
    if unique_id and ctx is not None:
        ctx.send(PROGRESS_TEXT_EVENT, progress_text_payload(
            unique_id, f"width: {width}, height: {height}\n frames: {frames}, batch size: {batch}"))
    return (width, height, frames, batch)
