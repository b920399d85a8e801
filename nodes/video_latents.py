"""EmptyHunyuanLatentVideo, ComfyUI 0.3.64's empty video latent (comfy_extras/nodes_hunyuan.py),
which Wan 2.1's and Wan 2.2 A14B's text-to-video templates use: zeros
`[batch_size, 16, (length - 1) // 4 + 1, height // 8, width // 8]`, the 16-channel latent of
the HunyuanVideo and Wan 2.1 VAEs (8x spatial, 4x temporal compression). Frame counts must be
`4k + 1` (nodes/wan_conditioning.py says why).

EmptyMochiLatentVideo (comfy_extras/nodes_mochi.py): Mochi's 12-channel latent, 8x spatial and 6x
temporal compression: zeros `[batch_size, 12, (length - 1) // 6 + 1, height // 8, width // 8]`
(any length, as ComfyUI computes it).
"""
from __future__ import annotations

from graph.native import MAX_RESOLUTION, Int, Output, node
import nodes.checks as checks
import nodes.wan_conditioning as wan

LATENT_CHANNELS = 16
DOWNSCALE = 8


@node("EmptyHunyuanLatentVideo", category="latent/video", python_module="comfy_extras.nodes_hunyuan",
      inputs=wan.size_inputs(848, 480, 25), outputs=[Output("LATENT")])
def empty_hunyuan_latent_video(width: int, height: int, length: int, batch_size: int = 1) -> tuple[dict]:
    """A batch of zero video latents."""
    from comfy_core.latent.video import empty_video_latent

    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    return ({"samples": empty_video_latent(batch_size, LATENT_CHANNELS, length, height, width, DOWNSCALE),
             "downscale_ratio_spacial": DOWNSCALE},)  # today's ComfyUI: resized for a 1/16 model (Wan 2.2 5B)


MOCHI_LATENT_CHANNELS = 12


@node("EmptyMochiLatentVideo", display_name=None, category="latent/video", python_module="comfy_extras.nodes_mochi",
      inputs=[Int("width", default=848, min=16, max=MAX_RESOLUTION, step=16),
              Int("height", default=480, min=16, max=MAX_RESOLUTION, step=16),
              Int("length", default=25, min=7, max=MAX_RESOLUTION, step=6),
              Int("batch_size", default=1, min=1, max=4096)],
      outputs=[Output("LATENT")])
def empty_mochi_latent_video(width: int, height: int, length: int, batch_size: int = 1) -> tuple[dict]:
    """A batch of zero Mochi latents."""
    import torch

    width = checks.integer(width, "width", 16, MAX_RESOLUTION)
    height = checks.integer(height, "height", 16, MAX_RESOLUTION)
    length = checks.integer(length, "length", 7, MAX_RESOLUTION)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    return ({"samples": torch.zeros([batch_size, MOCHI_LATENT_CHANNELS, (length - 1) // 6 + 1, height // DOWNSCALE,
                                     width // DOWNSCALE])},)
