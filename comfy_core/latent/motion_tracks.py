"""Point tracks as motion conditioning for Wan ATI ("Any Trajectory Instruction", Wang et al.
2025), after ComfyUI's WanTrackToVideo (comfy_extras/nodes_wan.py, 0.3.64), written here.

A track is the path of one image point, `{"x": ..., "y": ...}` in pixels of the video frame,
recorded at 121 instants (shorter tracks are padded with invisible points, longer ones cut).
`resample_tracks` turns N tracks into per-frame rows `(time, x, y, visible)` for `length`
frames: positions centred and scaled by the short side (so the frame spans +-1 along it),
visibility as +-1, the first instant kept and the other 120 resampled to `length - 1` frames by
repeating each `b` times and taking every `a`-th from the second (`a / b = 120 / (length - 1)`).

`splat_tracks` moves the first latent frame's features along the tracks: each track's feature is
read (bilinear) at its first position; in every later latent frame the four frames it packs
vote for the track's position (visible ones averaged); every latent pixel takes the weighted sum
of its `topk` nearest tracks' features, with Gaussian weights `exp(-temperature * d^2)` of the
distance in the same +-aspect coordinates, over what was there scaled by `1 - sum of weights`.
The returned mask is that weight (1 for the first frame), one copy per pixel-frame slot.
"""
from __future__ import annotations

import json
import math
from typing import Any

import torch
import torch.nn.functional as F

TRACK_POINTS = 121  # instants per recorded track
RECORDED_STEPS = TRACK_POINTS - 1


class TrackFormatError(ValueError):
    """Tracks that are not JSON lists of {"x", "y"} points."""


def _is_point(value: Any) -> bool:
    return isinstance(value, dict) and "x" in value and "y" in value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_tracks(text: str) -> list[list[list[dict]]]:
    """`tracks` as the editor writes it -> batches of tracks of points. Accepted: one track (a list
    of points), a list of tracks, or a list of such lists (one per batch item); single quotes are
    read as double quotes, as ComfyUI does. An empty list gives no batches."""
    try:
        parsed = json.loads(text.replace("'", '"'))
    except json.JSONDecodeError as exc:
        raise TrackFormatError(f"tracks are not JSON: {exc}") from None
    if not isinstance(parsed, list):
        raise TrackFormatError(f"tracks must be a JSON list, got {type(parsed).__name__}")
    if not parsed:
        return []
    if _is_point(parsed[0]):
        parsed = [parsed]  # one track
    if parsed and isinstance(parsed[0], list) and parsed[0] and _is_point(parsed[0][0]):
        parsed = [parsed]  # the tracks of one batch item
    for batch in parsed:
        if not isinstance(batch, list) or not batch:
            raise TrackFormatError("every batch of tracks must be a non-empty list of tracks")
        for track in batch:
            if not isinstance(track, list) or not track or not all(_is_point(p) for p in track):
                raise TrackFormatError("every track must be a non-empty list of {\"x\": ..., \"y\": ...} points")
            if not all(_is_number(p["x"]) and _is_number(p["y"]) for p in track):
                raise TrackFormatError("track point coordinates must be finite numbers (pixels)")
    return parsed


def track_array(track: list[dict]) -> torch.Tensor:
    """One track -> `[121, 3]` float32 (x, y, visible): padded with invisible zeros, or cut."""
    points = torch.tensor([[float(p["x"]), float(p["y"]), 1.0] for p in track[:TRACK_POINTS]], dtype=torch.float32)
    return F.pad(points, (0, 0, 0, TRACK_POINTS - points.shape[0]))


def resampled_steps(frames: int) -> torch.Tensor:
    """Which of the 120 recorded steps each of `frames` video frames after the first takes."""
    g = math.gcd(RECORDED_STEPS, frames)
    a, b = RECORDED_STEPS // g, frames // g
    return torch.arange(1, RECORDED_STEPS * b, a) // b


def resample_tracks(tracks: torch.Tensor, width: int, height: int, length: int) -> torch.Tensor:
    """`[N, 121, 3]` pixel tracks -> `[length, N, 4]` rows (time in -1..1, x, y, visible +-1)."""
    short = min(width, height)
    centre = torch.tensor([width / 2, height / 2], dtype=tracks.dtype)
    xy = (tracks[..., :2] - centre) / short * 2
    visible = tracks[..., 2:3] * 2 - 1
    time = torch.linspace(-1, 1, TRACK_POINTS, dtype=tracks.dtype).view(1, -1, 1).expand_as(visible)
    rows = torch.cat([time, xy, visible], dim=-1).transpose(0, 1)  # [121, N, 4]
    steps = resampled_steps(length - 1)
    if steps.numel() != length - 1:
        raise ValueError(f"resample_tracks: {length} frames cannot be resampled from the {TRACK_POINTS} track "
                         f"points (ComfyUI's resampling gives {steps.numel() + 1}); take another length")
    return torch.cat([rows[:1], rows[1:][steps]], dim=0)


def splat_tracks(rows: torch.Tensor, latent: torch.Tensor, temperature: float, topk: int,
                 slots: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Tracks `[L, N, 4]` (L = 4(T - 1) + 1) over one latent `[C, T, h, w]` -> (weight mask
    `[slots, T, h, w]`, the latent with the first frame's features moved along the tracks)."""
    channels, frames, h, w = latent.shape
    n = rows.shape[1]
    if rows.shape[0] != slots * (frames - 1) + 1:
        raise ValueError(f"splat_tracks: {rows.shape[0]} track frames for {frames} latent frames")
    short = min(h, w)
    xy, visible = rows[..., 1:3], rows[..., 3:4].clamp(0, 1)
    extent = torch.tensor([w / short, h / short], dtype=rows.dtype)
    start = (xy[:1] / extent).clamp(-1, 1)  # [1, N, 2] in grid_sample's -1..1 of the frame
    gx = torch.linspace(-w / short, w / short, w, dtype=rows.dtype)
    gy = torch.linspace(-h / short, h / short, h, dtype=rows.dtype)
    grid = torch.stack(torch.meshgrid(gx, gy, indexing="xy"), dim=-1)  # [h, w, 2]: (x, y)
    seen = visible[1:].reshape(frames - 1, slots, n, 1).sum(1)  # [T-1, N, 1]
    where = (xy[1:] * visible[1:]).reshape(frames - 1, slots, n, 2).sum(1) / (seen + 1e-5)  # [T-1, N, 2]
    distance = (where[:, None, None] - grid[None, :, :, None]).pow(2).sum(-1)  # [T-1, h, w, N]
    weight = torch.exp(-distance * temperature) * seen.clamp(0, 1).view(frames - 1, 1, 1, n)
    nearest, index = torch.topk(weight, k=min(topk, n), dim=-1)  # [T-1, h, w, k]
    features = F.grid_sample(latent[:, :1].movedim(1, 0), start.unsqueeze(0).to(latent.dtype), mode="bilinear",
                             padding_mode="zeros", align_corners=False)[0, :, 0].T  # [N, C]
    moved = (features[index] * nearest.unsqueeze(-1)).sum(-2).permute(3, 0, 1, 2)  # [C, T-1, h, w]
    total = nearest.sum(-1)  # [T-1, h, w]
    mixed = moved + latent[:, 1:] * (1 - total.clamp(0, 1))
    out = torch.cat([latent[:, :1], mixed], dim=1)
    mask = torch.cat([torch.ones_like(total[:1]), total], dim=0)
    return mask[None].expand(slots, -1, -1, -1), out
