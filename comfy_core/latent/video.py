"""Video latent geometry and the conditioning tensors of Wan's image-to-video nodes, after
ComfyUI's comfy_extras/nodes_wan.py and nodes_hunyuan.py (0.3.64), written here.

Wan's (and HunyuanVideo's) causal video VAEs keep the first frame on its own and pack every
following four frames into one latent frame, so `length` pixel frames give
`(length - 1) // 4 + 1` latent frames and only lengths `4k + 1` are taken exactly
(`is_packable_length`). The helpers here are the pieces the nodes share:

    latent_frames        pixel frames -> latent frames
    fit_frames           IMAGE frames resized and centre-cropped to the video size
                         (ComfyUI's `common_upscale(..., "bilinear", "center")`)
    grey_video           the 0.5 grey frames that stand for "nothing known here"
    frames_to_mask_slots a per-pixel-frame mask `[1, 1, 4T, h, w]` regrouped into the
                         `[1, 4, T, h, w]` a Wan i2v model concatenates (four slots per latent
                         frame, the first latent frame's single pixel frame filling all four)
    vace_mask_latent     VACE's pixel mask `[length, H, W, 1]` folded into `[64, T, h, w]`: each
                         8 x 8 pixel patch's values become 64 channels, resampled in time

Pure torch; no graph import.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from comfy_core.image.resize import upscale_samples

TEMPORAL_FACTOR = 4  # pixel frames per latent frame after the first
VACE_STRIDE = 8  # VACE masks are folded in 8 x 8 pixel patches (Wan 2.1's VAE stride)


def latent_frames(length: int) -> int:
    """Latent frames of a video of `length` pixel frames: the first frame, then one per four."""
    return (length - 1) // TEMPORAL_FACTOR + 1


def is_packable_length(length: int) -> bool:
    """True when `length` pixel frames fill the latent frames exactly (`4k + 1`)."""
    return length >= 1 and (length - 1) % TEMPORAL_FACTOR == 0


def empty_video_latent(batch_size: int, channels: int, length: int, height: int, width: int,
                       downscale: int) -> torch.Tensor:
    """Zeros `[batch_size, channels, latent_frames(length), height // downscale, width // downscale]`."""
    return torch.zeros([batch_size, channels, latent_frames(length), height // downscale, width // downscale])


def fit_frames(images: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """IMAGE frames `[N, H, W, C]` -> `[N, height, width, C]`: centre-cropped to the target's
    aspect ratio, then bilinear, as ComfyUI's nodes resize their start images and control videos."""
    return upscale_samples(images.movedim(-1, 1), width, height, "bilinear", "center").movedim(1, -1)


def grey_video(length: int, height: int, width: int, channels: int = 3, *,
               dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> torch.Tensor:
    """`[length, height, width, channels]` of 0.5: the frames the model is to make up."""
    return torch.full((length, height, width, channels), 0.5, dtype=dtype, device=device)


def frames_to_mask_slots(mask: torch.Tensor) -> torch.Tensor:
    """A mask over pixel-frame slots `[1, 1, 4T, h, w]` -> `[1, 4, T, h, w]` (slot k of latent
    frame t is channel k at time t), the layout of `concat_mask` for Wan's first/last-frame and
    Fun models."""
    _, _, slots, h, w = mask.shape
    if slots % TEMPORAL_FACTOR:
        raise ValueError(f"frames_to_mask_slots: {slots} slots are not a multiple of {TEMPORAL_FACTOR}")
    return mask.view(1, slots // TEMPORAL_FACTOR, TEMPORAL_FACTOR, h, w).transpose(1, 2)


def known_frames_mask(latent_length: int, h: int, w: int, *, first: int = 0, last: int = 0) -> torch.Tensor:
    """`[1, 4, T, h, w]` ones, zero where pixel frames are given: `first` frames at the start
    (the first latent frame stands for one pixel frame but has four slots, so `first + 3` slots
    are cleared) and `last` frames at the end."""
    mask = torch.ones((1, 1, latent_length * TEMPORAL_FACTOR, h, w))
    if first:
        mask[:, :, :first + TEMPORAL_FACTOR - 1] = 0.0
    if last:
        mask[:, :, -last:] = 0.0
    return frames_to_mask_slots(mask)


def vace_mask_latent(mask: torch.Tensor, latent_length: int) -> torch.Tensor:
    """VACE's pixel mask `[length, H, W, 1]` (H, W multiples of 8) -> `[64, T, H / 8, W / 8]`:
    the 8 x 8 values of each patch as channels (row within the patch major), then resampled in
    time to `latent_length` frames by nearest-exact interpolation, as Wan's VACE reads it."""
    length, height, width = mask.shape[0], mask.shape[1], mask.shape[2]
    s = VACE_STRIDE
    if height % s or width % s:
        raise ValueError(f"vace_mask_latent: sides {height} x {width} are not multiples of {s}")
    h, w = height // s, width // s
    patches = mask.reshape(length, h, s, w, s).permute(2, 4, 0, 1, 3).reshape(s * s, length, h, w)
    return F.interpolate(patches.unsqueeze(0), size=(latent_length, h, w), mode="nearest-exact").squeeze(0)
