"""EmptyHunyuanLatentVideo, ComfyUI 0.3.64's empty video latent (comfy_extras/nodes_hunyuan.py),
which Wan 2.1's and Wan 2.2 A14B's text-to-video templates use: zeros
`[batch_size, 16, (length - 1) // 4 + 1, height // 8, width // 8]`, the 16-channel latent of
the HunyuanVideo and Wan 2.1 VAEs (8x spatial, 4x temporal compression). Frame counts must be
`4k + 1` (nodes/wan_conditioning.py says why).
"""
from __future__ import annotations

from graph.native import Output, node
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
