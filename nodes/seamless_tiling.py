"""ModelPatchSeamlessTiling and VAEDecodeSeamlessTiling (today's ComfyUI,
comfy_extras/nodes_seamless_tiling.py @1a0ab7134ac08b2d734e8ddca238c4d651419325), declared as its
V3 schema renders them; the work is comfy_core/model_patches/seamless_tiling.py.

* ModelPatchSeamlessTiling: a clone of the MODEL whose `model_function_wrapper` blends the plain
  and the half-rolled predictions so the sampled latent wraps around on the tiled axes ("x",
  "y" or "x and y"; `context_size` the blend width in latent pixels). It runs the model twice
  per call for one axis, four times for both; a call with a ControlNet is refused. The input
  MODEL is not changed.
* VAEDecodeSeamlessTiling: decodes with `context_size` latent pixels of periodic context on each
  tiled side and crops the image back (a nested audio-video latent: its first part; a video's
  frames as one batch, as VAEDecode).
"""
from __future__ import annotations

from typing import Any

import nodes.checks as checks
from graph.v3_schema import Combo, Int, Output, Socket, v3_node
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_seamless_tiling"
TILING_MODES = ["x", "y", "x and y"]  # comfy_core's TILING_MODES, spelled here so rendering needs no torch


def _widths(tiling: Any, context_size: Any) -> tuple[int, int]:
    from comfy_core.model_patches.seamless_tiling import tiling_widths

    checks.choice(tiling, TILING_MODES, "tiling")
    return tiling_widths(tiling, checks.integer(context_size, "context_size", 1, 256))


@v3_node("ModelPatchSeamlessTiling", display_name="Seamless Tiling", category="model/patch", python_module=MODULE,
         experimental=True,
         description="Blends cyclically shifted denoiser predictions for seamless image tiling. Runs the model twice "
                     "per step for one axis or four times for both axes.",
         inputs=[Socket("model", "MODEL"),
                 Combo("tiling", TILING_MODES, default="x and y"),
                 Int("context_size", default=8, min=1, max=256, step=1,
                     tooltip="Width of the seam blend on each enabled side, in latent pixels.")],
         outputs=[Output("MODEL")])
def model_patch_seamless_tiling(model: Any, tiling: str, context_size: int) -> tuple[Any]:
    """A clone of `model` whose predictions wrap around on the tiled axes."""
    from comfy_core.model_patches.seamless_tiling import SeamlessTiling

    model = checks.model(model)
    blend_y, blend_x = _widths(tiling, context_size)
    patched = model.clone()
    previous = patched.model_options.get("model_function_wrapper")
    patched.set_option("model_function_wrapper", SeamlessTiling(blend_y, blend_x, previous))
    return (patched,)


@v3_node("VAEDecodeSeamlessTiling", display_name="Seamless Tiling VAE Decode", category="model/latent",
         python_module=MODULE, experimental=True,
         description="Decodes an image latent with periodic context and crops the result back to its original size.",
         inputs=[Socket("samples", "LATENT"),
                 Socket("vae", "VAE"),
                 Combo("tiling", TILING_MODES, default="x and y"),
                 Int("context_size", default=8, min=1, max=256, step=1,
                     tooltip="Periodic context on each enabled side, in latent pixels. Larger values use more VRAM.")],
         outputs=[Output("IMAGE")])
def vae_decode_seamless_tiling(samples: dict, vae: Any, tiling: str, context_size: int) -> tuple[Any]:
    """The decoded IMAGE of a latent decoded with periodic context on the tiled sides."""
    from comfy_core.model_patches.errors import ModelPatchError
    from comfy_core.model_patches.seamless_tiling import decode_seamless

    latent = checks.latent(samples, ndims=(4, 5), nested=True)
    if getattr(latent, "is_nested", False):  # ComfyUI decodes a nested [video, audio] latent's first part
        latent = checks.latent({"samples": latent.unbind()[0]}, ndims=(4, 5))
    vae = checks.vae(vae)
    pad_y, pad_x = _widths(tiling, context_size)
    try:
        return (decode_seamless(vae.decode, latent, pad_y, pad_x),)
    except ModelPatchError as exc:
        raise NodeInputError("samples", "an image latent", str(exc)) from exc
