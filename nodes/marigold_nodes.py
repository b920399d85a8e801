"""MarigoldV2PostProcess, "Marigold V2 Post-Process" (today's ComfyUI, comfy_extras/nodes_marigold.py):
the decoded image of a Marigold V2 prediction (Ke et al. 2024, "Repurposing Diffusion-Based Image
Generators for Monocular Depth Estimation"; V2 runs on Qwen-Image-Edit with a modality LoRA and its
own VAE) turned into a picture, one rule per `prediction`:

- depth: the channel mean `d` `[B, H, W, 1]`, normalised per image so the nearest point is white:
  `(max d - d) / max(max d - min d, 1e-6)`, repeated on the three channels (the decoder's value
  grows with distance, so it is inverted).
- normals: each pixel mapped to -1..1, scaled to unit length (a zero vector stays zero: the length
  is clamped at 1e-12, as torch's `F.normalize`) and mapped back to 0..1.
- albedo: linear RGB to sRGB: `12.92 x` up to 0.0031308, `1.055 x^(1/2.4) - 0.055` above.

The batch is kept; nothing is clamped beyond what each rule says (ComfyUI's node is the reference).
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Combo, Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_marigold"
PREDICTIONS = ["depth", "normals", "albedo"]
SRGB_KNEE = 0.0031308  # the IEC 61966-2-1 linear-segment limit
DEPTH_EPS = 1e-6


def depth_to_image(image: Any) -> Any:
    """`[B, H, W, C]` decoded depth -> `[B, H, W, 3]` grey, near = 1, far = 0, per image."""
    d = image.mean(dim=-1, keepdim=True)  # [B, H, W, 1]
    lo = d.amin(dim=(1, 2, 3), keepdim=True)  # [B, 1, 1, 1]
    hi = d.amax(dim=(1, 2, 3), keepdim=True)
    return ((hi - d) / (hi - lo).clamp(min=DEPTH_EPS)).repeat(1, 1, 1, 3)


def normals_to_image(image: Any) -> Any:
    """`[B, H, W, 3]` decoded normals -> unit vectors, stored in 0..1."""
    import torch.nn.functional as F

    return (F.normalize(image * 2.0 - 1.0, dim=-1) + 1.0) * 0.5


def albedo_to_image(image: Any) -> Any:
    """Linear albedo -> sRGB (the transfer function of IEC 61966-2-1)."""
    import torch

    curve = 1.055 * image.clamp(min=SRGB_KNEE) ** (1.0 / 2.4) - 0.055  # clamped: no NaN below the knee
    return torch.where(image <= SRGB_KNEE, image * 12.92, curve)


RULES = {"depth": depth_to_image, "normals": normals_to_image, "albedo": albedo_to_image}


@v3_node("MarigoldV2PostProcess", display_name="Marigold V2 Post-Process", category="image/geometry estimation",
         python_module=MODULE,
         description="Turns a decoded Marigold V2 prediction into an image: normalized depth with near as bright, "
                     "unit surface normals, or sRGB albedo.",
         inputs=[Socket("image", "IMAGE"), Combo("prediction", PREDICTIONS)],
         outputs=[Output("IMAGE")])
def marigold_v2_post_process(image: Any, prediction: str) -> tuple[Any]:
    """See the module docstring."""
    image = checks.image_batch(image, "image")
    rule = RULES.get(prediction) if isinstance(prediction, str) else None
    if rule is None:
        raise NodeInputError("prediction", f"one of {PREDICTIONS}", describe(prediction))
    return (rule(image),)
