"""Alpha compositing nodes: ComfyUI's `comfy_extras.nodes_compositing` (PorterDuffImageComposite,
SplitImageWithAlpha, JoinImageWithAlpha).

Names, sockets and semantics are ComfyUI 0.3.64's, written here; the maths is in
comfy_core/image/porter_duff.py. As everywhere in ComfyUI, alpha travels as a MASK where
1 means transparent (mask = 1 - alpha).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from comfy_core.image.names import PORTER_DUFF_MODES
from graph.native import Combo, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

MODULE = "comfy_extras.nodes_compositing"


def _resized(planes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """[B, H, W, C] resized to height x width: bicubic after a centre crop to the target's
    aspect ratio (ComfyUI's `common_upscale(..., "bicubic", "center")`)."""
    from comfy_core.image.resize import upscale_samples

    return upscale_samples(planes.movedim(-1, 1), width, height, "bicubic", "center").movedim(1, -1)


@node("PorterDuffImageComposite", category="mask/compositing", display_name="Porter-Duff Image Composite",
      python_module=MODULE,
      inputs=[Input("source", "IMAGE"), Input("source_alpha", "MASK"), Input("destination", "IMAGE"),
              Input("destination_alpha", "MASK"), Combo("mode", PORTER_DUFF_MODES, default="DST")],
      outputs=[Output("IMAGE"), Output("MASK")])
def porter_duff_image_composite(source: torch.Tensor, source_alpha: torch.Tensor, destination: torch.Tensor,
                                destination_alpha: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Porter-Duff composite of source and destination (each with its alpha mask) by `mode`:
    the image and its mask. As ComfyUI, only the first min(batch sizes) items are composited;
    the destination's mask is resized to the destination image, the source image to the
    destination image and the source mask to the destination's (bicubic, centre crop)."""
    from comfy_core.image.porter_duff import porter_duff

    src = checks.image_batch(source, "source")
    dst = checks.image_batch(destination, "destination")
    src_mask = checks.mask_batch(source_alpha, "source_alpha")
    dst_mask = checks.mask_batch(destination_alpha, "destination_alpha")
    mode = checks.choice(mode, PORTER_DUFF_MODES, "mode")
    if src.shape[-1] != dst.shape[-1]:
        raise NodeInputError("source", f"an IMAGE with {dst.shape[-1]} channels, as the destination",
                             f"{src.shape[-1]} channels")
    batch = min(len(src), len(src_mask), len(dst), len(dst_mask))
    src, dst = src[:batch], dst[:batch]
    src_mask, dst_mask = src_mask[:batch, ..., None], dst_mask[:batch, ..., None]  # [B, H, W, 1]
    height, width = dst.shape[1], dst.shape[2]
    if dst_mask.shape[1:3] != dst.shape[1:3]:
        dst_mask = _resized(dst_mask, height, width)
    if src.shape != dst.shape:
        src = _resized(src, height, width)
    if src_mask.shape != dst_mask.shape:
        src_mask = _resized(src_mask, height, width)
    image, mask = porter_duff(src, src_mask, dst, dst_mask, mode)
    return image, mask.squeeze(-1)


@node("SplitImageWithAlpha", category="mask/compositing", display_name="Split Image with Alpha",
      python_module=MODULE, inputs=[Input("image", "IMAGE")], outputs=[Output("IMAGE"), Output("MASK")])
def split_image_with_alpha(image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The colour channels (the first three) and the alpha as a mask (1 - alpha; all 0, i.e.
    opaque, for an image without alpha)."""
    import torch

    image = checks.image_batch(image, "image")
    alpha = image[..., 3] if image.shape[-1] > 3 else torch.ones_like(image[..., 0])
    return image[..., :3], 1.0 - alpha


@node("JoinImageWithAlpha", category="mask/compositing", display_name="Join Image with Alpha",
      python_module=MODULE, inputs=[Input("image", "IMAGE"), Input("alpha", "MASK")], outputs=[Output("IMAGE")])
def join_image_with_alpha(image: torch.Tensor, alpha: torch.Tensor) -> tuple[torch.Tensor]:
    """An RGBA image: the first three channels of `image` and 1 - `alpha` (resized bilinearly
    to the image) as alpha. As ComfyUI, the result has min(batch sizes) items."""
    import torch
    import torch.nn.functional as F

    image = checks.image_batch(image, "image")
    if image.shape[-1] < 3:
        raise NodeInputError("image", "an RGB or RGBA IMAGE", f"{image.shape[-1]} channel(s)")
    alpha = checks.mask_batch(alpha, "alpha")
    batch = min(len(image), len(alpha))
    coverage = 1.0 - F.interpolate(alpha.unsqueeze(1), size=(image.shape[1], image.shape[2]),
                                   mode="bilinear").squeeze(1)  # [b, H, W]
    return (torch.cat((image[:batch, ..., :3], coverage[:batch, ..., None].to(image)), dim=-1),)
