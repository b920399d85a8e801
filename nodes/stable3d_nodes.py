"""Stable Zero123 and SV3D conditioning with ComfyUI 0.3.64's names, sockets and semantics
(comfy_extras/nodes_stable3d.py): StableZero123_Conditioning, StableZero123_Conditioning_Batched,
SV3D_Conditioning.

Each encodes `init_image` with the CLIP vision model (its projected `image_embeds`, one token a
batch: `[1, B, P]`) and, resized to width x height (bilinear, centre crop), with the VAE as the
`concat_latent_image`; the negative is zeros of both. Zero123's token gets the camera appended:
`[radians(-elevation), sin(azimuth), cos(azimuth), pi / 2]` (its polar angle is `90 - elevation`,
written relative to 90 degrees), one camera per latent in the batched node, each step adding the
increments. SV3D keeps the token and passes the orbit as `elevation` / `azimuth` lists, one entry
a frame, the azimuth stepping by `360 / (frames - 1)` from 0.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from graph.native import MAX_RESOLUTION, Float, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_stable3d"
LATENT_CHANNELS = 4
_OUTPUTS = [Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")]


def camera_embedding(elevation: float, azimuth: float) -> "torch.Tensor":
    """Zero123's camera token `[1, 1, 4]` for a view at `elevation` / `azimuth` degrees."""
    import torch

    return torch.tensor([[[math.radians(-elevation), math.sin(math.radians(azimuth)), math.cos(math.radians(azimuth)),
                           math.pi / 2]]])


def _angle(name: str, default: float, low: float = -180.0) -> Any:
    return Float(name, default=default, min=low, max=-low, step=0.1, round=False)


def _size(name: str, default: int) -> Any:
    return Int(name, default=default, min=16, max=MAX_RESOLUTION, step=8)


def _encode(clip_vision: Any, init_image: Any, vae: Any, width: Any, height: Any) -> tuple[Any, Any, int, int]:
    """(pooled `[1, B, P]`, the VAE latent of the resized image, width, height)."""
    from comfy_core.image.resize import upscale_samples

    init_image = checks.image_batch(init_image, "init_image")
    vae = checks.vae(vae)
    width = checks.integer(width, "width", 16, MAX_RESOLUTION)
    height = checks.integer(height, "height", 16, MAX_RESOLUTION)
    if clip_vision is None or not callable(getattr(clip_vision, "encode_image", None)):
        raise NodeInputError("clip_vision", "a CLIP_VISION model (CLIPVisionLoader)", describe(clip_vision))
    embeds = getattr(clip_vision.encode_image(init_image), "image_embeds", None)
    if getattr(embeds, "ndim", None) != 2:
        raise NodeInputError("clip_vision", "a CLIP vision model with projected image_embeds [B, P]", describe(embeds))
    pixels = upscale_samples(init_image.movedim(-1, 1), width, height, "bilinear", "center").movedim(1, -1)
    return embeds.unsqueeze(0), vae.encode(pixels[..., :3]), width, height


def _pair(positive_cond: Any, pooled: Any, latent: Any, **extra: Any) -> tuple[list, list]:
    import torch

    return ([[positive_cond, {"concat_latent_image": latent, **extra}]],
            [[torch.zeros_like(pooled), {"concat_latent_image": torch.zeros_like(latent), **extra}]])


@node("StableZero123_Conditioning", display_name=None, category="conditioning/3d_models", python_module=MODULE,
      inputs=[Input("clip_vision", "CLIP_VISION"), Input("init_image", "IMAGE"), Input("vae", "VAE"),
              _size("width", 256), _size("height", 256), Int("batch_size", default=1, min=1, max=4096),
              _angle("elevation", 0.0), _angle("azimuth", 0.0)],
      outputs=_OUTPUTS)
def stable_zero123_conditioning(clip_vision: Any, init_image: Any, vae: Any, width: int, height: int, batch_size: int,
                                elevation: float, azimuth: float) -> tuple[list, list, dict]:
    import torch

    pooled, latent, width, height = _encode(clip_vision, init_image, vae, width, height)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    camera = camera_embedding(checks.number(elevation, "elevation"), checks.number(azimuth, "azimuth"))
    cond = torch.cat([pooled, camera.to(pooled).repeat(pooled.shape[0], 1, 1)], dim=-1)
    positive, negative = _pair(cond, pooled, latent)
    return positive, negative, {"samples": torch.zeros([batch_size, LATENT_CHANNELS, height // 8, width // 8])}


@node("StableZero123_Conditioning_Batched", display_name=None, category="conditioning/3d_models", python_module=MODULE,
      inputs=[Input("clip_vision", "CLIP_VISION"), Input("init_image", "IMAGE"), Input("vae", "VAE"),
              _size("width", 256), _size("height", 256), Int("batch_size", default=1, min=1, max=4096),
              _angle("elevation", 0.0), _angle("azimuth", 0.0), _angle("elevation_batch_increment", 0.0),
              _angle("azimuth_batch_increment", 0.0)],
      outputs=_OUTPUTS)
def stable_zero123_conditioning_batched(clip_vision: Any, init_image: Any, vae: Any, width: int, height: int,
                                        batch_size: int, elevation: float, azimuth: float,
                                        elevation_batch_increment: float,
                                        azimuth_batch_increment: float) -> tuple[list, list, dict]:
    """One camera per latent of the batch, the i-th at `elevation + i * elevation_batch_increment`
    (azimuth likewise); the image token is repeated (or cut) to the batch."""
    import torch
    from comfy_core.image.composite import repeat_to_batch

    pooled, latent, width, height = _encode(clip_vision, init_image, vae, width, height)
    batch_size = checks.integer(batch_size, "batch_size", 1, 4096)
    elevation, azimuth = checks.number(elevation, "elevation"), checks.number(azimuth, "azimuth")
    step_e = checks.number(elevation_batch_increment, "elevation_batch_increment")
    step_a = checks.number(azimuth_batch_increment, "azimuth_batch_increment")
    cameras = []
    for _ in range(batch_size):  # accumulated as ComfyUI does (the float sums match its rounding)
        cameras.append(camera_embedding(elevation, azimuth))
        elevation += step_e
        azimuth += step_a
    tokens = repeat_to_batch(pooled, batch_size)
    cond = torch.cat([tokens, torch.cat(cameras).to(tokens)], dim=-1)
    positive, negative = _pair(cond, pooled, latent)
    return positive, negative, {"samples": torch.zeros([batch_size, LATENT_CHANNELS, height // 8, width // 8]),
                                "batch_index": [0] * batch_size}


@node("SV3D_Conditioning", display_name=None, category="conditioning/3d_models", python_module=MODULE,
      inputs=[Input("clip_vision", "CLIP_VISION"), Input("init_image", "IMAGE"), Input("vae", "VAE"),
              _size("width", 576), _size("height", 576), Int("video_frames", default=21, min=1, max=4096),
              _angle("elevation", 0.0, low=-90.0)],
      outputs=_OUTPUTS)
def sv3d_conditioning(clip_vision: Any, init_image: Any, vae: Any, width: int, height: int, video_frames: int,
                      elevation: float) -> tuple[list, list, dict]:
    import torch

    pooled, latent, width, height = _encode(clip_vision, init_image, vae, width, height)
    frames = checks.integer(video_frames, "video_frames", 1, 4096)
    elevation = checks.number(elevation, "elevation")
    step = 360 / (max(frames, 2) - 1)
    azimuths, azimuth = [], 0
    for _ in range(frames):
        azimuths.append(azimuth)
        azimuth += step
    positive, negative = _pair(pooled, pooled, latent, elevation=[elevation] * frames, azimuth=azimuths)
    return positive, negative, {"samples": torch.zeros([frames, LATENT_CHANNELS, height // 8, width // 8])}
