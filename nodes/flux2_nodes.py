"""Flux.2's nodes (today's ComfyUI, comfy_extras/nodes_flux.py, V3 nodes): EmptyFlux2LatentImage
(zeros in Flux.2's latent space: 128 channels at 1/16 of the image) and Flux2Scheduler (FLUX.2's
resolution- and step-dependent schedule, comfy_core/families/flux2/schedule.py).
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION
from graph.v3_schema import Int, Output, v3_node
import nodes.checks as checks

# torch is imported inside the functions that run (registration must not import it).

MODULE = "comfy_extras.nodes_flux"
FLUX2_LATENT_CHANNELS = 128
FLUX2_DOWNSCALE = 16


@v3_node("EmptyFlux2LatentImage", display_name="Empty Flux 2 Latent", category="latent", python_module=MODULE,
         inputs=[Int("width", default=1024, min=16, max=MAX_RESOLUTION, step=16),
                 Int("height", default=1024, min=16, max=MAX_RESOLUTION, step=16),
                 Int("batch_size", default=1, min=1, max=4096)],
         outputs=[Output("LATENT")])
def empty_flux2_latent_image(width: int, height: int, batch_size: int = 1) -> tuple[dict]:
    """Zeros `[batch, 128, height // 16, width // 16]`, with ComfyUI's `downscale_ratio_spacial` 16."""
    import torch

    width = checks.integer(width, "width", 16, MAX_RESOLUTION)
    height = checks.integer(height, "height", 16, MAX_RESOLUTION)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    samples = torch.zeros((batch_size, FLUX2_LATENT_CHANNELS, height // FLUX2_DOWNSCALE, width // FLUX2_DOWNSCALE))
    return ({"samples": samples, "downscale_ratio_spacial": FLUX2_DOWNSCALE},)


@v3_node("Flux2Scheduler", category="sampling/custom_sampling/schedulers", python_module=MODULE,
         inputs=[Int("steps", default=20, min=1, max=4096),
                 Int("width", default=1024, min=16, max=MAX_RESOLUTION, step=1),
                 Int("height", default=1024, min=16, max=MAX_RESOLUTION, step=1)],
         outputs=[Output("SIGMAS")])
def flux2_scheduler(steps: int, width: int, height: int) -> tuple[Any]:
    """FLUX.2's sigmas `[steps + 1]` for an image of `width` x `height`."""
    from comfy_core.families.flux2.schedule import flux2_sigmas

    steps = checks.integer(steps, "steps", 1, 4096)
    width = checks.integer(width, "width", 16, MAX_RESOLUTION)
    height = checks.integer(height, "height", 16, MAX_RESOLUTION)
    return (flux2_sigmas(steps, width, height),)
