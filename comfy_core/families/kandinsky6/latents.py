"""The Kandinsky 6 joint LATENT: `samples` a nested latent `[video [B, 16, T, H/8, W/8], audio
[B, Ta, 40]]` with `frame_rate` and `sample_rate`, and its image-to-video+audio reference tail.

Behaviour of ComfyUI's `comfy_extras/nodes_kandinsky6.py` (`_audio_latent_len`,
`_validate_generation_shape`, `_validate_joint_latent`, and the three nodes' bodies); written here.

- `audio_latent_frames(length, fps)`: `ceil(length / fps * 44100 / 1024)`.
- `empty_joint_latent(width, height, length, batch_size)`: zeros, 24 fps; width / height multiples
  of 16, `length = 4n + 1`, batch size 1, latent sizes divisible by the patch size (1, 2, 2).
- `with_reference_tail(latent, reference)`: the one encoded reference frame appended after the
  video frames (`tail_cond_first_frame`), a nested `noise_mask` of ones with zeros over that frame
  and ones over the audio, and the markers `k6_reference_tail` / `k6_generated_video_latent_frames`.
- `without_reference_tail(latent)`: the inverse after sampling: the tail frame, the mask and the
  markers dropped.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from comfy_core.families.kandinsky6 import contract as c
from comfy_core.latent.nested import NestedTensor


class Kandinsky6LatentError(ValueError):
    """A joint latent, size or reference that Kandinsky 6 cannot use."""


def audio_latent_frames(length: int, fps: float) -> int:
    """Audio latent frames covering `length` video frames at `fps` (ComfyUI's `_audio_latent_len`)."""
    return int(math.ceil(length / fps * c.AUDIO_SAMPLE_RATE / c.AUDIO_DOWNSAMPLE_FACTOR))


def _check_patch(shape: tuple[int, int, int]) -> None:
    if any(size < 1 or size % patch for size, patch in zip(shape, c.PATCH_SIZE)):
        raise Kandinsky6LatentError(f"video latent frames/height/width divisible by the DiT patch size "
                                    f"{c.PATCH_SIZE}, got {shape}")


def check_generation_shape(width: int, height: int, length: int, batch_size: int) -> tuple[int, int, int]:
    """The latent (frames, height, width) of a generation of this size, or an error."""
    if width % c.IMAGE_DIVISIBILITY or height % c.IMAGE_DIVISIBILITY:
        raise Kandinsky6LatentError(f"width and height divisible by {c.IMAGE_DIVISIBILITY}, got {width}x{height}")
    if length < 1 or (length - 1) % c.VIDEO_TEMPORAL_FACTOR:
        raise Kandinsky6LatentError(f"a frame count {c.VIDEO_TEMPORAL_FACTOR}*n+1, got {length}")
    if batch_size != 1:
        raise Kandinsky6LatentError(f"batch_size 1 (Kandinsky 6's only batch size), got {batch_size}")
    shape = ((length - 1) // c.VIDEO_TEMPORAL_FACTOR + 1, height // c.VIDEO_SPATIAL_FACTOR,
             width // c.VIDEO_SPATIAL_FACTOR)
    _check_patch(shape)
    return shape


def streams(latent: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The (video, audio) parts of a joint LATENT."""
    samples = latent.get("samples") if isinstance(latent, dict) else None
    if not getattr(samples, "is_nested", False):
        raise Kandinsky6LatentError("a joint LATENT with a video and an audio stream (Kandinsky6EmptyLatent)")
    parts = samples.unbind()
    if len(parts) != 2:
        raise Kandinsky6LatentError(f"exactly two latent streams, got {len(parts)}")
    return parts[0], parts[1]


def check_joint(latent: Any) -> None:
    """ComfyUI's `_validate_joint_latent`: shapes, channels, patch divisibility, and with a
    `frame_rate` the audio length that matches the video's duration."""
    video, audio = streams(latent)
    if video.ndim != 5:
        raise Kandinsky6LatentError(f"a 5-D video latent [B, C, T, H, W], got {tuple(video.shape)}")
    if audio.ndim != 3:
        raise Kandinsky6LatentError(f"a 3-D audio latent [B, T, C], got {tuple(audio.shape)}")
    if video.shape[0] != 1 or audio.shape[0] != 1:
        raise Kandinsky6LatentError(f"batch size 1 in both streams, got {video.shape[0]} and {audio.shape[0]}")
    if video.shape[1] != c.VIDEO_CHANNELS:
        raise Kandinsky6LatentError(f"{c.VIDEO_CHANNELS} video latent channels, got {video.shape[1]}")
    if audio.shape[-1] != c.AUDIO_CHANNELS:
        raise Kandinsky6LatentError(f"{c.AUDIO_CHANNELS} audio latent channels, got {audio.shape[-1]}")
    _check_patch(tuple(video.shape[2:]))
    if audio.shape[1] < 1:
        raise Kandinsky6LatentError("an audio latent of at least one frame")
    fps = latent.get("frame_rate")
    if fps is not None:
        frames = (video.shape[2] - 1) * c.VIDEO_TEMPORAL_FACTOR + 1
        expected = audio_latent_frames(frames, float(fps))
        if audio.shape[1] != expected:
            raise Kandinsky6LatentError(f"{expected} audio latent frames for the video's duration, got {audio.shape[1]}")


def empty_joint_latent(width: int, height: int, length: int, batch_size: int = 1,
                       device: Any = "cpu") -> dict:
    frames, h, w = check_generation_shape(width, height, length, batch_size)
    video = torch.zeros(batch_size, c.VIDEO_CHANNELS, frames, h, w, device=device)
    audio = torch.zeros(batch_size, audio_latent_frames(length, c.DEFAULT_FPS), c.AUDIO_CHANNELS, device=device)
    latent = {"samples": NestedTensor((video, audio)), "frame_rate": c.DEFAULT_FPS,
              "sample_rate": c.AUDIO_SAMPLE_RATE}
    check_joint(latent)
    return latent


def with_reference_tail(latent: dict, reference: Any) -> dict:
    check_joint(latent)
    video, audio = streams(latent)
    if getattr(reference, "is_nested", False) or not isinstance(reference, torch.Tensor):
        raise Kandinsky6LatentError("a plain video LATENT from VAEEncode as the reference")
    if reference.ndim == 4:
        reference = reference.unsqueeze(2)
    if reference.ndim != 5 or reference.shape[2] != 1:
        raise Kandinsky6LatentError(f"one encoded reference frame [B, C, 1, H, W], got {tuple(reference.shape)}")
    expected = (video.shape[0], video.shape[1], video.shape[3], video.shape[4])
    actual = (reference.shape[0], reference.shape[1], reference.shape[3], reference.shape[4])
    if actual != expected:
        raise Kandinsky6LatentError(f"a reference of batch/channels/height/width {expected} (resize the image to "
                                    f"the generation size before VAEEncode), got {actual}")
    joined = torch.cat((video, reference.to(device=video.device, dtype=video.dtype)), dim=2)
    video_mask = torch.ones_like(joined)
    video_mask[:, :, -1] = 0
    out = dict(latent)
    out["samples"] = NestedTensor((joined, audio))
    out["noise_mask"] = NestedTensor((video_mask, torch.ones_like(audio)))
    out["k6_reference_tail"] = True
    out["k6_generated_video_latent_frames"] = int(video.shape[2])
    return out


def without_reference_tail(latent: Any) -> dict:
    video, audio = streams(latent)
    generated = latent.get("k6_generated_video_latent_frames")
    if latent.get("k6_reference_tail") is not True or not isinstance(generated, int) or isinstance(generated, bool):
        raise Kandinsky6LatentError("the reference-tail markers of Kandinsky6ImageToVideoAudio (sampled by KSampler)")
    if generated < 1 or video.shape[2] != generated + 1:
        raise Kandinsky6LatentError(f"{generated} + 1 video latent frames, got {video.shape[2]}")
    out = dict(latent)
    out["samples"] = NestedTensor((video[:, :, :generated], audio))
    for key in ("noise_mask", "k6_reference_tail", "k6_generated_video_latent_frames"):
        out.pop(key, None)
    check_joint(out)
    return out
