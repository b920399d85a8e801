"""Autoregressive video nodes (Causal Forcing, Self-Forcing), V3 schemas as today's ComfyUI declares
them (`comfy_extras/nodes_ar_video.py`); the sampler in comfy_core/sampling/ar_video.py, the causal
attention of the Wan DiT in comfy_core/families/wan/causal.py.

- EmptyARVideoLatent: zeros `[batch_size, 16, (length - 1) // 4 + 1, height // 8, width // 8]`.
- SamplerARVideo: the `ar_video` SAMPLER with `num_frame_per_block` latent frames a block.
- ARVideoI2V: the first image of `start_image`, resized bilinear with a centre crop to width x height
  and VAE-encoded, stored as `transformer_options["ar_config"]["initial_latent"]` on a clone of the
  model (the sampler records it into the key/value cache and keeps it as the first latent frames),
  and the empty latent as EmptyARVideoLatent's. The same T2V checkpoint serves image-to-video.
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_ar_video"
CHANNELS = 16
DOWNSCALE = 8
SIDE_MAX = 8192
LENGTH_MAX = 1024
BATCH_MAX = 64
AR_CONFIG = "ar_config"


def _size_inputs() -> list:
    return [Int("width", default=832, min=16, max=SIDE_MAX, step=16),
            Int("height", default=480, min=16, max=SIDE_MAX, step=16),
            Int("length", default=81, min=1, max=LENGTH_MAX, step=4),
            Int("batch_size", default=1, min=1, max=BATCH_MAX)]


def _empty_latent(width: Any, height: Any, length: Any, batch_size: Any) -> "Any":
    import torch

    width = checks.integer(width, "width", 16, SIDE_MAX)
    height = checks.integer(height, "height", 16, SIDE_MAX)
    length = checks.integer(length, "length", 1, LENGTH_MAX)
    batch_size = checks.integer(batch_size, "batch_size", 1, BATCH_MAX)
    frames = (length - 1) // 4 + 1
    return torch.zeros([batch_size, CHANNELS, frames, height // DOWNSCALE, width // DOWNSCALE])


@v3_node("EmptyARVideoLatent", category="latent/video", python_module=MODULE,
         inputs=_size_inputs(), outputs=[Output("LATENT")])
def empty_ar_video_latent(width: int, height: int, length: int, batch_size: int) -> tuple:
    """See the module docstring."""
    return ({"samples": _empty_latent(width, height, length, batch_size)},)


@v3_node("SamplerARVideo", category="sampling/custom_sampling/samplers", display_name="Sampler AR Video",
         python_module=MODULE,
         inputs=[Int("num_frame_per_block", default=1, min=1, max=64,
                     tooltip="Frames per autoregressive block. 1 = framewise, 3 = chunkwise. Must match the "
                             "checkpoint's training mode.")],
         outputs=[Output("SAMPLER")])
def sampler_ar_video(num_frame_per_block: int) -> tuple:
    """See the module docstring."""
    from comfy_core.sampling.guider import ksampler

    per_block = checks.integer(num_frame_per_block, "num_frame_per_block", 1, 64)
    return (ksampler("ar_video", {"num_frame_per_block": per_block}),)


@v3_node("ARVideoI2V", category="conditioning/video_models", python_module=MODULE,
         inputs=[Socket("model", "MODEL"), Socket("vae", "VAE"), Socket("start_image", "IMAGE"), *_size_inputs()],
         outputs=[Output("MODEL"), Output("LATENT")])
def ar_video_i2v(model: Any, vae: Any, start_image: Any, width: int, height: int, length: int,
                 batch_size: int) -> tuple:
    """See the module docstring."""
    from comfy_core.image.resize import upscale_samples

    model = checks.model(model)
    vae = checks.vae(vae)
    image = checks.image_batch(start_image, "start_image")
    latent = _empty_latent(width, height, length, batch_size)
    first = upscale_samples(image[:1].movedim(-1, 1), int(width), int(height), "bilinear", "center").movedim(1, -1)
    initial = vae.encode(first[:, :, :, :3])
    if getattr(initial, "ndim", None) != 5 or initial.shape[1] != CHANNELS:
        raise NodeInputError("vae", f"a video VAE (Wan 2.1's) whose encode returns a latent [1, {CHANNELS}, T, h, w]",
                             f"one returning {describe(initial)}")
    patched = model.clone()
    options = dict(patched.model_options.get("transformer_options", {}))
    options[AR_CONFIG] = {**(options.get(AR_CONFIG) or {}), "initial_latent": initial}
    patched.model_options["transformer_options"] = options
    return (patched, {"samples": latent})
