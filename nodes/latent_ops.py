"""Latent utility nodes: LatentUpscaleBy, LatentComposite, LatentBlend, LatentFromBatch,
RepeatLatentBatch, LatentFlip, LatentRotate, LatentCrop, SetLatentNoiseMask.

Names, inputs, categories and semantics are ComfyUI's (`nodes.py` at the reference snapshot,
0.3.64), written here. A LATENT is a dict: `samples` [B, C, h, w] plus optional keys that the
nodes carry along as ComfyUI does:

- `batch_index`: the noise index of each batch item (KSampler draws item i's noise as the
  `batch_index[i]`-th sample of the seed's stream). LatentFromBatch and RepeatLatentBatch keep it
  consistent so a picked or repeated item gets the noise it had in the full batch.
- `noise_mask` [B?, 1, H, W]: where KSampler may change the latent (1) or must keep it (0).
  LatentFromBatch and RepeatLatentBatch select / repeat it with the batch; the other nodes pass
  it through unchanged, exactly as ComfyUI (which copies the dict and replaces only `samples`).

x, y, width, height and feather are in pixels and divided by 8 (the SD VAE's down factor), as
ComfyUI does for every family.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from comfy_core.image.resize import upscale_samples
from graph.native import MAX_RESOLUTION, Combo, Float, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.latent import LATENT_UPSCALE_METHODS

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

FLIP_METHODS = ["x-axis: vertically", "y-axis: horizontally"]
ROTATIONS = ["none", "90 degrees", "180 degrees", "270 degrees"]
# torch.rot90 turns from dim 3 (width) towards dim 2 (height): k quarter turns clockwise.
_QUARTER_TURNS = {"none": 0, "90 degrees": 1, "180 degrees": 2, "270 degrees": 3}
# LatentCrop keeps at least this many latent pixels (64 px) from its origin, as ComfyUI.
_MIN_CROP = 8


def resize_latent(samples: torch.Tensor, width: int, height: int, method: str) -> torch.Tensor:
    """[B, C, h, w] to [B, C, height, width] in latent pixels with a LatentUpscale method."""
    if method == "bislerp":
        from comfy_core.models.latent_resize import bislerp

        return bislerp(samples, width, height)
    return upscale_samples(samples, width, height, method, "disabled")


def repeat_masks_to(masks: torch.Tensor, batch: int) -> torch.Tensor:
    """Tile a mask batch [b, ...] until it covers `batch` items, then cut to `batch` (b < batch)."""
    reps = math.ceil(batch / masks.shape[0])
    return masks.repeat((reps,) + (1,) * (masks.ndim - 1))[:batch]


def feather_weights(length: int, feather: int, near: bool, far: bool) -> torch.Tensor:
    """LatentComposite's 1-D edge ramp over `length` latent pixels: for t < feather, pixel t from
    an inner near edge and pixel length-1-t from an inner far edge are scaled by (t+1)/feather.

    The slices follow Python's rules, like ComfyUI's loop: with feather > length the far-edge
    index goes negative and wraps, scaling some pixels more than once, as there."""
    import torch

    weights = torch.ones(length)
    for t in range(feather):
        factor = (t + 1) / feather
        if near:
            weights[t:t + 1] *= factor
        if far:
            weights[length - 1 - t:length - t] *= factor
    return weights


@node("LatentUpscaleBy", category="latent", display_name="Upscale Latent By",
      inputs=[Input("samples", "LATENT"), Combo("upscale_method", LATENT_UPSCALE_METHODS),
              Float("scale_by", default=1.5, min=0.01, max=8.0, step=0.01)],
      outputs=[Output("LATENT")])
def latent_upscale_by(samples: dict, upscale_method: str, scale_by: float) -> tuple[dict]:
    """Resize by a factor: each side becomes round(side * scale_by) latent pixels."""
    latent = checks.latent(samples, ndims=(4,))
    method = checks.choice(upscale_method, LATENT_UPSCALE_METHODS, "upscale_method")
    width, height = round(latent.shape[-1] * scale_by), round(latent.shape[-2] * scale_by)
    if width < 1 or height < 1:
        raise NodeInputError("scale_by", "a factor leaving at least one latent pixel per side",
                              f"{scale_by} on {latent.shape[-1]}x{latent.shape[-2]} latent pixels")
    out = dict(samples)
    out["samples"] = resize_latent(latent, width, height, method)
    return (out,)


@node("LatentComposite", category="latent", display_name="Latent Composite",
      inputs=[Input("samples_to", "LATENT"), Input("samples_from", "LATENT"),
              Int("x", default=0, min=0, max=MAX_RESOLUTION, step=8),
              Int("y", default=0, min=0, max=MAX_RESOLUTION, step=8),
              Int("feather", default=0, min=0, max=MAX_RESOLUTION, step=8)],
      outputs=[Output("LATENT")])
def latent_composite(samples_to: dict, samples_from: dict, x: int, y: int, feather: int = 0) -> tuple[dict]:
    """Paste `samples_from` into `samples_to` at (x, y) px, cut at samples_to's edges. With
    feather > 0, the pasted block fades in over feather px along each edge that lies inside
    samples_to (edges on samples_to's border stay hard)."""
    target = checks.latent(samples_to, "samples_to", ndims=(4,))
    source = checks.latent(samples_from, "samples_from", ndims=(4,))
    if source.shape[1] != target.shape[1] or source.shape[0] not in (1, target.shape[0]):
        raise NodeInputError("samples_from", f"samples with {target.shape[1]} channels and batch 1 or "
                             f"{target.shape[0]}", describe(source))
    x, y, feather = x // 8, y // 8, feather // 8
    out = dict(samples_to)
    result = target.clone()
    height = min(source.shape[2], target.shape[2] - y)
    width = min(source.shape[3], target.shape[3] - x)
    if height > 0 and width > 0:
        block = source[:, :, :height, :width]
        if feather == 0:
            result[:, :, y:y + height, x:x + width] = block
        else:
            rows = feather_weights(height, feather, y != 0, y + height < target.shape[2])
            cols = feather_weights(width, feather, x != 0, x + width < target.shape[3])
            mask = (rows[:, None] * cols[None, :]).to(block)  # [height, width]
            region = result[:, :, y:y + height, x:x + width]
            result[:, :, y:y + height, x:x + width] = block * mask + region * (1.0 - mask)
    out["samples"] = result
    return (out,)


@node("LatentBlend", category="_for_testing", display_name="Latent Blend",
      inputs=[Input("samples1", "LATENT"), Input("samples2", "LATENT"),
              Float("blend_factor", default=0.5, min=0, max=1, step=0.01)],
      outputs=[Output("LATENT")])
def latent_blend(samples1: dict, samples2: dict, blend_factor: float) -> tuple[dict]:
    """samples1 * blend_factor + samples2 * (1 - blend_factor); samples2 is first resized to
    samples1's size (bicubic, centre crop) when the shapes differ, as ComfyUI."""
    first = checks.latent(samples1, "samples1", ndims=(4,))
    second = checks.latent(samples2, "samples2", ndims=(4,))
    batches_fit = second.shape[0] == first.shape[0] or 1 in (first.shape[0], second.shape[0])
    if second.shape[1] != first.shape[1] or not batches_fit:
        raise NodeInputError("samples2", f"samples with {first.shape[1]} channels and batch 1 or {first.shape[0]}",
                             describe(second))
    if second.shape != first.shape:
        second = upscale_samples(second, first.shape[3], first.shape[2], "bicubic", "center")
    out = dict(samples1)
    out["samples"] = first * blend_factor + second * (1 - blend_factor)
    return (out,)


@node("LatentFromBatch", category="latent/batch", display_name="Latent From Batch",
      inputs=[Input("samples", "LATENT"), Int("batch_index", default=0, min=0, max=63),
              Int("length", default=1, min=1, max=64)],
      outputs=[Output("LATENT")])
def latent_from_batch(samples: dict, batch_index: int, length: int) -> tuple[dict]:
    """Items batch_index .. batch_index+length-1 (clamped to the batch). The result keeps the
    items' noise indices (`batch_index`, from the input's or their positions) so sampling it
    gives the noise they had in the full batch; a per-item noise mask is cut the same way."""
    latent = checks.latent(samples)  # [B, C, h, w] or a video's [B, C, T, h, w]: cut on B
    batch_index = checks.integer(batch_index, "batch_index", 0)
    length = checks.integer(length, "length", 1)
    total = latent.shape[0]
    start = min(total - 1, batch_index)
    count = min(total - start, length)
    out = dict(samples)
    out["samples"] = latent[start:start + count].clone()
    masks = samples.get("noise_mask")
    if masks is not None:
        if masks.shape[0] == 1:
            out["noise_mask"] = masks.clone()
        else:
            if masks.shape[0] < total:
                masks = repeat_masks_to(masks, total)
            out["noise_mask"] = masks[start:start + count].clone()
    if "batch_index" in samples:
        out["batch_index"] = list(samples["batch_index"])[start:start + count]
    else:
        out["batch_index"] = list(range(start, start + count))
    return (out,)


@node("RepeatLatentBatch", category="latent/batch", display_name="Repeat Latent Batch",
      inputs=[Input("samples", "LATENT"), Int("amount", default=1, min=1, max=64)],
      outputs=[Output("LATENT")])
def repeat_latent_batch(samples: dict, amount: int) -> tuple[dict]:
    """The whole batch `amount` times. Noise indices of each copy are shifted past the previous
    copy's, so copies get new noise; a noise mask with one item stays shared."""
    latent = checks.latent(samples)  # image or video latents: repeated on the batch axis
    amount = checks.integer(amount, "amount", 1)
    out = dict(samples)
    out["samples"] = latent.repeat((amount,) + (1,) * (latent.ndim - 1))
    masks = samples.get("noise_mask")
    if masks is not None and masks.shape[0] > 1:
        # ComfyUI repeats the mask batch as given, even when it is shorter than the latent batch
        # (KSampler then tiles it to the new batch); kept so masked batches sample the same.
        out["noise_mask"] = masks.repeat((amount,) + (1,) * (masks.ndim - 1))
    if "batch_index" in samples:
        indices = list(samples["batch_index"])
        offset = max(indices) - min(indices) + 1
        out["batch_index"] = indices + [i + copy * offset for copy in range(1, amount) for i in indices]
    return (out,)


@node("LatentFlip", category="latent/transform", display_name="Flip Latent",
      inputs=[Input("samples", "LATENT"), Combo("flip_method", FLIP_METHODS)],
      outputs=[Output("LATENT")])
def latent_flip(samples: dict, flip_method: str) -> tuple[dict]:
    """Mirror top-bottom ("x-axis: vertically") or left-right ("y-axis: horizontally")."""
    import torch

    latent = checks.latent(samples, ndims=(4,))
    method = checks.choice(flip_method, FLIP_METHODS, "flip_method")
    out = dict(samples)
    out["samples"] = torch.flip(latent, dims=[2] if method.startswith("x") else [3])
    return (out,)


@node("LatentRotate", category="latent/transform", display_name="Rotate Latent",
      inputs=[Input("samples", "LATENT"), Combo("rotation", ROTATIONS)],
      outputs=[Output("LATENT")])
def latent_rotate(samples: dict, rotation: str) -> tuple[dict]:
    """Rotate clockwise by quarter turns (90 and 270 degrees swap width and height)."""
    import torch

    latent = checks.latent(samples, ndims=(4,))
    turns = _QUARTER_TURNS[checks.choice(rotation, ROTATIONS, "rotation")]
    out = dict(samples)
    out["samples"] = torch.rot90(latent, k=turns, dims=[3, 2])
    return (out,)


@node("LatentCrop", category="latent/transform", display_name="Crop Latent",
      inputs=[Input("samples", "LATENT"),
              Int("width", default=512, min=64, max=MAX_RESOLUTION, step=8),
              Int("height", default=512, min=64, max=MAX_RESOLUTION, step=8),
              Int("x", default=0, min=0, max=MAX_RESOLUTION, step=8),
              Int("y", default=0, min=0, max=MAX_RESOLUTION, step=8)],
      outputs=[Output("LATENT")])
def latent_crop(samples: dict, width: int, height: int, x: int, y: int) -> tuple[dict]:
    """The width x height px region at (x, y), cut at the latent's edges; the origin is moved
    back so that at least 64 px (8 latent pixels) remain after it, as ComfyUI.

    On latents under 64 px ComfyUI's origin goes negative and its slice wraps (it can even come
    out empty); the origin is held at 0 here instead."""
    latent = checks.latent(samples, ndims=(4,))
    x = max(0, min(x // 8, latent.shape[3] - _MIN_CROP))
    y = max(0, min(y // 8, latent.shape[2] - _MIN_CROP))
    out = dict(samples)
    out["samples"] = latent[:, :, y:y + height // 8, x:x + width // 8]
    return (out,)


@node("SetLatentNoiseMask", category="latent/inpaint", display_name="Set Latent Noise Mask",
      inputs=[Input("samples", "LATENT"), Input("mask", "MASK")],
      outputs=[Output("LATENT")])
def set_latent_noise_mask(samples: dict, mask: torch.Tensor) -> tuple[dict]:
    """Attach `mask` ([H, W] or [B, H, W], any resolution) as the noise mask [B, 1, H, W]:
    KSampler changes the latent where it is 1 and keeps it where it is 0. A video / one-frame
    latent `[B, C, T, h, w]` takes it too (the sampler resizes it over frames, as ComfyUI)."""
    checks.latent(samples, ndims=(4, 5))
    masks = checks.mask_batch(mask, ndims=(3, 2, 4))  # [B, H, W]: ComfyUI reshapes any mask
    out = dict(samples)
    out["noise_mask"] = masks.unsqueeze(1)  # [B, 1, H, W]
    return (out,)
