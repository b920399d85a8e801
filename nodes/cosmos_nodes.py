"""NVIDIA Cosmos's latent nodes with ComfyUI 0.3.64's names, sockets and semantics
(comfy_extras/nodes_cosmos.py): EmptyCosmosLatentVideo, CosmosImageToVideoLatent (Cosmos 1.0,
8x temporal compression) and CosmosPredict2ImageToVideoLatent (Cosmos Predict2 on the Wan 2.1
VAE, 4x temporal).

The image-to-video latents: a zero latent of the video's size with the start (and / or end)
image encoded into its first (last) latent frames and a `noise_mask` that is 0 there (kept) and
1 elsewhere (sampled). The image is resized to the video's size (bilinear, centre crop) and padded
with mid-grey frames to the shortest clip the VAE packs into whole latent frames: for the start
image one latent frame beyond its own, so the VAE's causal first frame is not the last one read
(ComfyUI's `vae_encode_with_padding`). Predict2 also writes, where the mask is 1, the Wan 2.1
latent format's `process_out` of zero (its per-channel mean) instead of zero.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.native import MAX_RESOLUTION, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_cosmos"
LATENT_CHANNELS = 16
DOWNSCALE = 8
PACKED_FRAMES = 8  # pixel frames per latent frame in the padding rule (ComfyUI's, for both models)


def _sizes(width: Any, height: Any, length: Any, batch_size: Any) -> tuple[int, int, int, int]:
    return (checks.integer(width, "width", 16, MAX_RESOLUTION), checks.integer(height, "height", 16, MAX_RESOLUTION),
            checks.integer(length, "length", 1, MAX_RESOLUTION), checks.integer(batch_size, "batch_size", 1, 4096))


def _size_inputs(width: int, height: int, length: int, length_step: int) -> list:
    return [Int("width", default=width, min=16, max=MAX_RESOLUTION, step=16),
            Int("height", default=height, min=16, max=MAX_RESOLUTION, step=16),
            Int("length", default=length, min=1, max=MAX_RESOLUTION, step=length_step),
            Int("batch_size", default=1, min=1, max=4096)]


@node("EmptyCosmosLatentVideo", display_name=None, category="latent/video", python_module=MODULE,
      inputs=_size_inputs(1280, 704, 121, 8), outputs=[Output("LATENT")])
def empty_cosmos_latent_video(width: int, height: int, length: int, batch_size: int = 1) -> tuple[dict]:
    """Zeros `[B, 16, (length - 1) // 8 + 1, height // 8, width // 8]`."""
    import torch

    width, height, length, batch_size = _sizes(width, height, length, batch_size)
    return ({"samples": torch.zeros([batch_size, LATENT_CHANNELS, (length - 1) // 8 + 1, height // DOWNSCALE,
                                     width // DOWNSCALE])},)


def encode_padded(vae: Any, image: "torch.Tensor", width: int, height: int, length: int, extra: int) -> "torch.Tensor":
    """`image` (a frame or frames) resized to the video's size, padded with mid-grey frames to
    `((frames - 1) // 8 + 1 + extra) * 8 - 7` frames (at most `length`), encoded; the latent
    frames of the image's own frames."""
    import torch
    from comfy_core.image.resize import upscale_samples

    pixels = upscale_samples(image[..., :3].movedim(-1, 1), width, height, "bilinear", "center").movedim(1, -1)
    frames = min(pixels.shape[0], length)
    padded = torch.full((min(length, ((frames - 1) // PACKED_FRAMES + 1 + extra) * PACKED_FRAMES - 7), height, width, 3),
                        0.5)
    padded[:frames] = pixels[:frames]
    latent = vae.encode(padded)
    if getattr(latent, "ndim", None) != 5:
        raise NodeInputError("vae", "a video VAE whose encode returns [B, C, T, h, w]", f"one returning {describe(latent)}")
    return latent[:, :, :(frames - 1) // PACKED_FRAMES + 1]


def image_to_video_latent(vae: Any, width: Any, height: Any, length: Any, batch_size: Any, start_image: Any,
                          end_image: Any, temporal: int, masked_fill: Any = None) -> tuple[dict]:
    """The shared body of both nodes (the module docstring); `temporal`: pixel frames per latent
    frame of the model's VAE; `masked_fill(latent)`: what the sampled region holds (zeros if None)."""
    import torch

    width, height, length, batch_size = _sizes(width, height, length, batch_size)
    latent = torch.zeros([1, LATENT_CHANNELS, (length - 1) // temporal + 1, height // DOWNSCALE, width // DOWNSCALE])
    if start_image is None and end_image is None:
        return ({"samples": latent},)
    vae = checks.vae(vae)
    mask = torch.ones([1, 1, *latent.shape[2:]])
    for image, name, extra, at_start in ((start_image, "start_image", 1, True), (end_image, "end_image", 0, False)):
        if image is None:
            continue
        encoded = encode_padded(vae, checks.image_batch(image, name), width, height, length, extra)
        count = min(encoded.shape[2], latent.shape[2])
        span = slice(0, count) if at_start else slice(latent.shape[2] - count, latent.shape[2])
        latent[:, :, span] = encoded[:, :, :count].to(latent)
        mask[:, :, span] = 0.0
    if masked_fill is not None:
        latent = masked_fill(latent) * mask + latent * (1.0 - mask)
    return ({"samples": latent.repeat(batch_size, 1, 1, 1, 1), "noise_mask": mask.repeat(batch_size, 1, 1, 1, 1)},)


@node("CosmosImageToVideoLatent", display_name=None, category="conditioning/inpaint", python_module=MODULE,
      inputs=[Input("vae", "VAE"), *_size_inputs(1280, 704, 121, 8), Input("start_image", "IMAGE", optional=True),
              Input("end_image", "IMAGE", optional=True)],
      outputs=[Output("LATENT")])
def cosmos_image_to_video_latent(vae: Any, width: int, height: int, length: int, batch_size: int,
                                 start_image: Any = None, end_image: Any = None) -> tuple[dict]:
    """Cosmos 1.0's image-to-video latent (8x temporal)."""
    return image_to_video_latent(vae, width, height, length, batch_size, start_image, end_image, 8)


@node("CosmosPredict2ImageToVideoLatent", display_name=None, category="conditioning/inpaint", python_module=MODULE,
      inputs=[Input("vae", "VAE"), *_size_inputs(848, 480, 93, 4), Input("start_image", "IMAGE", optional=True),
              Input("end_image", "IMAGE", optional=True)],
      outputs=[Output("LATENT")])
def cosmos_predict2_image_to_video_latent(vae: Any, width: int, height: int, length: int, batch_size: int,
                                          start_image: Any = None, end_image: Any = None) -> tuple[dict]:
    """Cosmos Predict2's image-to-video latent (the Wan 2.1 VAE: 4x temporal; the sampled region
    holds the latent format's mean)."""
    from comfy_core.families.wan.latent_format import wan21_latent_format

    return image_to_video_latent(vae, width, height, length, batch_size, start_image, end_image, 4,
                                 masked_fill=wan21_latent_format().process_out)
