"""EmptyChromaRadianceLatentImage and ChromaRadianceOptions (today's ComfyUI,
comfy_extras/nodes_chroma_radiance.py, V3 nodes), over the Chroma Radiance family
(comfy_core/families/chroma/radiance.py): pixel-space Chroma, whose "latent" is the image itself,
3 channels at full resolution.
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION
from graph.v3_schema import Boolean, Float, Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError

# torch is imported inside the functions that run (registration must not import it).

MODULE = "comfy_extras.nodes_chroma_radiance"


@v3_node("EmptyChromaRadianceLatentImage", category="latent/chroma_radiance", python_module=MODULE,
         inputs=[Int("width", default=1024, min=16, max=MAX_RESOLUTION, step=16),
                 Int("height", default=1024, min=16, max=MAX_RESOLUTION, step=16),
                 Int("batch_size", default=1, min=1, max=4096)],
         outputs=[Output("LATENT")])
def empty_chroma_radiance_latent_image(width: int, height: int, batch_size: int = 1) -> tuple[dict]:
    """Zeros `[batch, 3, height, width]`: an empty pixel-space latent."""
    import torch

    width = checks.integer(width, "width", 16, MAX_RESOLUTION)
    height = checks.integer(height, "height", 16, MAX_RESOLUTION)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    return ({"samples": torch.zeros((batch_size, 3, height, width))},)


@v3_node("ChromaRadianceOptions", category="model_patches/chroma_radiance", python_module=MODULE,
         description="Allows setting advanced options for the Chroma Radiance model.",
         inputs=[Socket("model", "MODEL"),
                 Boolean("preserve_wrapper", default=True,
                         tooltip="When enabled, will delegate to an existing model function wrapper if it exists. "
                                 "Generally should be left enabled."),
                 Float("start_sigma", default=1.0, min=0.0, max=1.0,
                       tooltip="First sigma that these options will be in effect."),
                 Float("end_sigma", default=0.0, min=0.0, max=1.0,
                       tooltip="Last sigma that these options will be in effect."),
                 Int("nerf_tile_size", default=-1, min=-1,
                     tooltip="Allows overriding the default NeRF tile size. -1 means use the default (32). 0 means "
                             "use non-tiling mode (may require a lot of VRAM).")],
         outputs=[Output("MODEL")])
def chroma_radiance_options(model: Any, preserve_wrapper: bool, start_sigma: float, end_sigma: float,
                            nerf_tile_size: int) -> tuple[Any]:
    """The MODEL itself when no option is set; else a clone whose model calls in the sigma range
    carry the options (comfy_core/model_patches/radiance_options.py)."""
    from comfy_core.model_patches.radiance_options import RadianceOptionsWrapper

    model = checks.model(model)
    if not isinstance(preserve_wrapper, bool):
        raise NodeInputError("preserve_wrapper", "a BOOLEAN", repr(preserve_wrapper))
    start = checks.number(start_sigma, "start_sigma", 0.0, 1.0)
    end = checks.number(end_sigma, "end_sigma", 0.0, 1.0)
    tile = checks.integer(nerf_tile_size, "nerf_tile_size", -1)
    options = {}
    if tile >= 0:
        options["nerf_tile_size"] = tile
    if not options:
        return (model,)
    previous = model.model_options.get("model_function_wrapper")
    patched = model.clone()
    patched.set_option("model_function_wrapper", RadianceOptionsWrapper(
        tuple(sorted(options.items())), start, end, previous if preserve_wrapper else None))
    return (patched,)
