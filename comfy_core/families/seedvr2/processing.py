"""SeedVR2's image / latent processing around the sampler, as today's ComfyUI's
comfy_extras/nodes_seedvr.py does it (SeedVR2Preprocess, SeedVR2PostProcessing,
SeedVR2TemporalChunk, SeedVR2TemporalMerge); the nodes (nodes/seedvr2_nodes.py) call these.

- `preprocess`: frames to 3 channels, clamped to 0..1, padded with zeros on the right / bottom to
  multiples of 16, and the clip padded with copies of its last frame to 4n + 1 frames (a single
  frame stays one; 2..4 frames become 5).
- `postprocess`: the decoded frames cropped back to the reference's size (and frame count), the
  colour corrected against the reference (resized bicubically to the output when it differs;
  `color_fix.py`), the reference's alpha re-attached, the sides cropped to even sizes.
- `temporal_chunks` / `merge_chunks`: a [B, 16, T, h, w] latent cut into overlapping runs of
  latent frames and put back together, the overlaps cross-faded (`crossfade_weights`).
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from comfy_core.families.seedvr2.color_fix import TRANSFERS

PAD_MULTIPLE = 16
TEMPORAL_RATIO = 4
SPATIAL_RATIO = 8
LATENT_CHANNELS = 16
COLOR_METHODS = ("lab", "wavelet", "adain", "none")
# ComfyUI's chunk-size law for the automatic mode (comfy/ldm/seedvr/constants.py): the sampler's
# memory grows linearly with latent frames x megapixels.
CHUNK_GIB_PER_MPX_FRAME = 0.55
CHUNK_RESERVED_GIB = 8.5
CHUNK_SIGMA_GIB = 0.55
CHUNK_SIGMA_K = 4


class SeedVR2ProcessingError(ValueError):
    """An input of the wrong shape or value for SeedVR2's processing."""


def as_videos(images: torch.Tensor, what: str) -> tuple[torch.Tensor, bool]:
    """(videos `[B, T, H, W, C]`, whether the input was 4-D): a 4-D IMAGE is one video of its frames."""
    if images.ndim == 4:
        return images.unsqueeze(0), True
    if images.ndim == 5:
        return images, False
    raise SeedVR2ProcessingError(f"{what}: expected a 4-D or 5-D IMAGE tensor, got shape {tuple(images.shape)}")


def pad_to_4n1(videos: torch.Tensor) -> torch.Tensor:
    """`[B, T, ...]` padded with copies of the last frame to 4n + 1 frames (T = 1 stays)."""
    t = videos.shape[1]
    if t < 1:
        raise SeedVR2ProcessingError("SeedVR2Preprocess expected at least one frame.")
    if t == 1 or (t - 1) % TEMPORAL_RATIO == 0:
        return videos
    extra = TEMPORAL_RATIO - (t - 1) % TEMPORAL_RATIO
    return torch.cat((videos, videos[:, -1:].expand(-1, extra, *videos.shape[2:])), dim=1)


def preprocess(images: torch.Tensor) -> torch.Tensor:
    """IMAGE `[T, H, W, C]` (one video) or `[B, T, H, W, C]` -> `[B, T', H', W', 3]` in 0..1 with H',
    W' multiples of 16 (zero padding right / bottom) and T' = 4n + 1 (the last frame repeated)."""
    videos, _ = as_videos(images, "SeedVR2Preprocess")
    if min(videos.shape[2], videos.shape[3]) < 2:
        raise SeedVR2ProcessingError(f"SeedVR2Preprocess: input shorter edge must be at least 2 pixels; got "
                                     f"{min(videos.shape[2], videos.shape[3])}.")
    videos = videos[..., :3].clamp(0.0, 1.0)
    h, w = videos.shape[2], videos.shape[3]
    pad_h, pad_w = (-h) % PAD_MULTIPLE, (-w) % PAD_MULTIPLE
    if pad_h or pad_w:
        videos = F.pad(videos, (0, 0, 0, pad_w, 0, pad_h))
    return pad_to_4n1(videos).contiguous()


def _restore_batch_time(decoded: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """A decode of B videos flattened into one `[1, B*T, ...]` back to `[B, T, ...]` when it divides."""
    if decoded.shape[0] != 1:
        return decoded
    ref_b, ref_t = reference.shape[:2]
    if ref_b < 1 or decoded.shape[1] % ref_b:
        return decoded
    per_video = decoded.shape[1] // ref_b
    if per_video < ref_t:
        return decoded
    return decoded.reshape(ref_b, per_video, *decoded.shape[2:])


def _resize_frames(frames: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """`[N, C, H, W]` bicubic (antialiased when shrinking, as torchvision's tensor resize)."""
    if frames.shape[-2:] == (height, width):
        return frames
    return F.interpolate(frames.float(), size=(height, width), mode="bicubic", align_corners=False,
                         antialias=True).to(frames.dtype)


def postprocess(images: torch.Tensor, reference: torch.Tensor, method: str,
                device: torch.device | str | None = None) -> torch.Tensor:
    """The decoded IMAGE aligned with the resized input `reference` and colour-corrected by
    `method` (lab / wavelet / adain / none); 4-D in, 4-D out."""
    if method not in COLOR_METHODS:
        raise SeedVR2ProcessingError(f"SeedVR2PostProcessing: unknown color_correction_method {method!r}")
    alpha = None
    if reference.shape[-1] == 4:
        alpha, reference = reference[..., 3:4], reference[..., :3]
    decoded, was_4d = as_videos(images, "SeedVR2PostProcessing")
    ref_full, _ = as_videos(reference, "SeedVR2PostProcessing")
    decoded = _restore_batch_time(decoded, ref_full)
    b, t = min(decoded.shape[0], ref_full.shape[0]), min(decoded.shape[1], ref_full.shape[1])
    height, width = min(decoded.shape[2], ref_full.shape[2]), min(decoded.shape[3], ref_full.shape[3])
    decoded = decoded[:b, :t, :height, :width]
    if method == "none":
        output = decoded
    else:
        ref = ref_full[:b, :t]
        channels = decoded.shape[-1]
        content = decoded.permute(0, 1, 4, 2, 3).reshape(b * t, channels, height, width) * 2.0 - 1.0
        style = ref.permute(0, 1, 4, 2, 3).reshape(b * t, ref.shape[-1], ref.shape[2], ref.shape[3])
        style = _resize_frames(style, height, width) * 2.0 - 1.0
        transfer = TRANSFERS[method]
        target = decoded.device if device is None else torch.device(device)
        frames = [transfer(content[i:i + 1].to(target), style[i:i + 1].to(target)).to(decoded.device)
                  for i in range(b * t)]  # one frame at a time bounds the working memory
        output = torch.cat(frames).reshape(b, t, channels, height, width).permute(0, 1, 3, 4, 2)
        output = ((output + 1.0) / 2.0).clamp(0.0, 1.0)
    if alpha is not None:
        alpha_5d, _ = as_videos(alpha, "SeedVR2PostProcessing")
        alpha_5d = alpha_5d[:output.shape[0], :output.shape[1], :output.shape[2], :output.shape[3]]
        output = torch.cat((output, alpha_5d.to(output.device, output.dtype)), dim=-1)
    output = output[:, :, :output.shape[2] - output.shape[2] % 2, :output.shape[3] - output.shape[3] % 2]
    if was_4d:
        output = output.reshape(-1, *output.shape[2:])
    return output


# --- temporal chunks --------------------------------------------------------------------------------

def crossfade_weights(overlap: int, device: Any = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The previous chunk's weights over an overlap of `overlap` frames (the next chunk gets 1 - w):
    1 over the first third, a half-cosine fall over the middle third, 0 over the last third."""
    ramp = torch.linspace(0.0, 1.0, overlap, device=device, dtype=dtype)
    ramp = ((ramp - 1.0 / 3.0) * 3.0).clamp(0.0, 1.0)
    return 0.5 + 0.5 * torch.cos(math.pi * ramp)


def auto_frames_per_chunk(samples: torch.Tensor, free_bytes: int | None) -> int:
    """The largest 4n + 1 pixel-frame chunk ComfyUI's memory law lets through (the whole clip when
    the free memory is unknown)."""
    t_pixel = TEMPORAL_RATIO * (samples.shape[2] - 1) + 1
    if free_bytes is None:
        return t_pixel
    free_gib = free_bytes / 1024 ** 3
    megapixels = samples.shape[0] * samples.shape[3] * samples.shape[4] * SPATIAL_RATIO ** 2 / 1e6
    budget = free_gib - CHUNK_RESERVED_GIB - CHUNK_SIGMA_K * CHUNK_SIGMA_GIB
    latent_frames = max(1, int(budget / (CHUNK_GIB_PER_MPX_FRAME * megapixels)))
    return min(TEMPORAL_RATIO * (latent_frames - 1) + 1, t_pixel)


def check_video_latent(samples: Any, what: str) -> torch.Tensor:
    if not isinstance(samples, torch.Tensor) or samples.ndim != 5:
        raise SeedVR2ProcessingError(f"{what}: expected a 5-D video latent (B, C, T, H, W); got "
                                     f"{tuple(getattr(samples, 'shape', ()))}.")
    if samples.shape[1] != LATENT_CHANNELS:
        raise SeedVR2ProcessingError(f"{what}: expected {LATENT_CHANNELS} latent channels; got shape "
                                     f"{tuple(samples.shape)}.")
    return samples


def temporal_chunks(latent: dict, temporal_overlap: int, frames_per_chunk: int) -> tuple[list[dict], int]:
    """(chunks, effective overlap): runs of `(frames_per_chunk - 1) / 4 + 1` latent frames, each
    starting `overlap` frames before the previous one ends (the overlap at most a chunk less one);
    the whole latent (overlap 0) when one chunk covers it."""
    samples = check_video_latent(latent["samples"], "SeedVR2TemporalChunk")
    if temporal_overlap < 0:
        raise SeedVR2ProcessingError(f"SeedVR2TemporalChunk: temporal_overlap must be >= 0; got {temporal_overlap}.")
    if frames_per_chunk < 1 or (frames_per_chunk - 1) % TEMPORAL_RATIO:
        raise SeedVR2ProcessingError(f"SeedVR2TemporalChunk: frames_per_chunk must be a 4n+1 pixel-frame count "
                                     f"(1, 5, 9, 13, 17, 21, ...); got {frames_per_chunk}.")
    t_latent = samples.shape[2]
    if TEMPORAL_RATIO * (t_latent - 1) + 1 <= frames_per_chunk:
        return [latent], 0
    chunk = (frames_per_chunk - 1) // TEMPORAL_RATIO + 1
    overlap = min(temporal_overlap, chunk - 1)
    step = chunk - overlap
    chunks = []
    for start in range(0, t_latent, step):
        end = min(start + chunk, t_latent)
        part = dict(latent)
        part["samples"] = samples[:, :, start:end].contiguous()
        chunks.append(part)
        if end >= t_latent:
            break
    return chunks, overlap


def merge_chunks(latents: list[dict], temporal_overlap: int) -> dict:
    """The chunks put back in sequence; each overlap the cross-fade of the previous content and
    the next chunk (a shorter last chunk fades over what it has)."""
    if temporal_overlap < 0:
        raise SeedVR2ProcessingError(f"SeedVR2TemporalMerge: temporal_overlap must be >= 0; got {temporal_overlap}.")
    if not latents:
        raise SeedVR2ProcessingError("SeedVR2TemporalMerge: no latents")
    chunks = [entry["samples"] for entry in latents]
    first = chunks[0]
    if first.ndim != 5:
        raise SeedVR2ProcessingError(f"SeedVR2TemporalMerge: expected 5-D video latents (B, C, T, H, W); chunk 0 "
                                     f"has shape {tuple(first.shape)}.")
    for i, chunk in enumerate(chunks[1:], start=1):
        if chunk.shape[:2] != first.shape[:2] or chunk.shape[3:] != first.shape[3:]:
            raise SeedVR2ProcessingError(f"SeedVR2TemporalMerge: chunk {i} shape {tuple(chunk.shape)} does not match "
                                         f"chunk 0 shape {tuple(first.shape)} outside the temporal axis.")
        if i < len(chunks) - 1 and chunk.shape[2] != first.shape[2]:
            raise SeedVR2ProcessingError(f"SeedVR2TemporalMerge: chunk {i} has {chunk.shape[2]} latent frames but "
                                         f"chunk 0 has {first.shape[2]}; only the final chunk may be shorter.")
    out = dict(latents[0])
    out.pop("noise_mask", None)
    if len(chunks) == 1:
        out["samples"] = first
        return out
    if temporal_overlap == 0:
        out["samples"] = torch.cat(chunks, dim=2)
        return out
    length = first.shape[2]
    step = length - min(temporal_overlap, length - 1)
    total = step * (len(chunks) - 1) + chunks[-1].shape[2]
    merged = first.new_empty((first.shape[0], first.shape[1], total, *first.shape[3:]))
    merged[:, :, :length] = first
    filled = length
    for i, chunk in enumerate(chunks[1:], start=1):
        start = i * step
        end = start + chunk.shape[2]
        fade = min(filled - start, chunk.shape[2])
        if fade > 0:
            w = crossfade_weights(fade, chunk.device, chunk.dtype).view(1, 1, fade, 1, 1)
            merged[:, :, start:start + fade] = merged[:, :, start:start + fade] * w + chunk[:, :, :fade] * (1.0 - w)
            merged[:, :, start + fade:end] = chunk[:, :, fade:]
        else:
            merged[:, :, start:end] = chunk
        filled = end
    out["samples"] = merged
    return out


__all__ = ["COLOR_METHODS", "SeedVR2ProcessingError", "auto_frames_per_chunk", "crossfade_weights", "merge_chunks",
           "postprocess", "preprocess", "temporal_chunks"]
