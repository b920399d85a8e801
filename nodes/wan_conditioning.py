"""Input checks and small pieces the Wan video nodes share (nodes/wan_nodes.py,
nodes/video_latents.py, nodes/camera_nodes.py): video sizes, frame counts, what a video VAE's
encode must return, and writing the same options into positive and negative.

Frame counts: the widgets step by 4 from 1 (ComfyUI's `length` inputs), and the validator,
like ComfyUI's, checks only min and max. A count off the step (82) is no video the VAE can
pack: ComfyUI quietly makes fewer frames or fails deep in a reshape. Here it is refused with a
`NodeInputError` naming the nearest lengths the model takes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from graph.native import MAX_RESOLUTION, Int
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MAX_BATCH = 4096


def size_inputs(width: int = 832, height: int = 480, length: int = 81, *, side_min: int = 16,
                side_step: int = 16, batch: bool = True) -> list:
    """ComfyUI's width, height, length (and batch_size) widgets of the Wan nodes."""
    inputs = [Int("width", default=width, min=side_min, max=MAX_RESOLUTION, step=side_step),
              Int("height", default=height, min=side_min, max=MAX_RESOLUTION, step=side_step),
              Int("length", default=length, min=1, max=MAX_RESOLUTION, step=4)]
    if batch:
        inputs.append(Int("batch_size", default=1, min=1, max=MAX_BATCH))
    return inputs


def frame_count(length: Any, input_name: str = "length") -> int:
    """A frame count `4k + 1` in 1..MAX_RESOLUTION (the first frame, then groups of four)."""
    from comfy_core.latent.video import is_packable_length

    length = checks.integer(length, input_name, 1, MAX_RESOLUTION)
    if not is_packable_length(length):
        below = (length - 1) // 4 * 4 + 1
        raise NodeInputError(input_name, "a frame count of the form 4k + 1 (1, 5, 9, ..., 81, ...): the video "
                                         "VAE keeps the first frame and packs the others in fours; the nearest "
                                         f"are {below} and {below + 4}", repr(length))
    return length


def video_size(width: Any, height: Any, length: Any, batch_size: Any = 1, *,
               side_min: int = 16) -> tuple[int, int, int, int]:
    """Checked (width, height, length, batch_size)."""
    return (checks.integer(width, "width", side_min, MAX_RESOLUTION),
            checks.integer(height, "height", side_min, MAX_RESOLUTION),
            frame_count(length), checks.integer(batch_size, "batch_size", 1, MAX_BATCH))


def video_vae(vae: Any) -> Any:
    """A VAE with ComfyUI's geometry attributes (`latent_channels`, `spacial_compression_encode`)."""
    vae = checks.vae(vae)
    if not hasattr(vae, "latent_channels") or not callable(getattr(vae, "spacial_compression_encode", None)):
        raise NodeInputError("vae", "a VAE with latent_channels and spacial_compression_encode()", describe(vae))
    return vae


def encode_video(vae: Any, frames: "torch.Tensor", channels: int | None = None) -> "torch.Tensor":
    """`vae.encode(frames[..., :3])`, which a video VAE (Wan's) returns as `[1, C, T, h, w]`;
    `channels`: C must be that (the latent the model concatenates it to)."""
    latent = vae.encode(frames[:, :, :, :3])
    if getattr(latent, "ndim", None) != 5 or (channels is not None and latent.shape[1] != channels):
        wanted = f"[1, {channels if channels is not None else 'C'}, T, h, w]"
        raise NodeInputError("vae", f"a video VAE (Wan's) whose encode returns a latent {wanted}",
                             f"one returning {describe(latent)}")
    return latent


def images(value: Any, input_name: str) -> "torch.Tensor | None":
    """An optional IMAGE batch (None when not connected)."""
    return None if value is None else checks.image_batch(value, input_name)


def set_values(conditioning: list, values: Mapping[str, Any], *, append: bool = False) -> list:
    """ComfyUI's `node_helpers.conditioning_set_values` (copies; inputs never mutated)."""
    from nodes.flux_nodes import set_values as conditioning_set_values

    return conditioning_set_values(conditioning, values, append=append)


def both(positive: list, negative: list, values: Mapping[str, Any], *, append: bool = False) -> tuple[list, list]:
    """`values` written into every entry of positive and of negative (ComfyUI's
    `node_helpers.conditioning_set_values` on each; `append` adds lists to those there)."""
    return set_values(positive, values, append=append), set_values(negative, values, append=append)


def conditionings(positive: Any, negative: Any) -> tuple[list, list]:
    return checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative")


def clip_vision_states(value: Any, input_name: str) -> Any:
    """A CLIP_VISION_OUTPUT with `penultimate_hidden_states` (what Wan's image embedding reads)."""
    if value is not None and getattr(value, "penultimate_hidden_states", None) is None:
        raise NodeInputError(input_name, "a CLIP_VISION_OUTPUT with penultimate_hidden_states (a CLIP vision "
                                         "model of two layers or more)", describe(value))
    return value
