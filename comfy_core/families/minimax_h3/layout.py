"""MiniMax H3's packed token sequence: the pure functions behind its layout (no module state).

After ComfyUI's `comfy/ldm/minimax/model.py` (its `PackedLayout`, grids and patchify helpers);
written here from its equations. The DiT runs one sequence per sample, its segments in this order:

    [text | keyframe condition rows | reference blocks | target audio | target video]

- text: the Qwen3-VL states (one row per token), positions `(i, 0, 0)`;
- video: the latent `[1, 24, T, H, W]` cut into 1x2x2 patches (`patchify_video`, one row of
  24 x 1 x 2 x 2 = 96 per patch, channel-major inside the patch), positions `(t, h, w)` with `h`
  and `w` on an area-normalised grid of 32 units per side of a square frame (`frame_grid`) and `t`
  advancing per latent frame by 5/3 of the pixel frames the frame stands for (1, 4, 4, 4, 4, ...:
  `FRAME_PER_TOKEN`, repeating every five latent frames);
- audio: the stereo latent `[1, 32, 2, T]` as `2 T` rows, channel 0's frames then channel 1's
  (`pack_audio`), positions `(cursor + t, 0, w_low)` for channel 0 and `(cursor + t, 0, w_high)`
  for channel 1, `w_low` / `w_high` the target video's first and last grid column;
- condition rows (keyframes from MiniMaxH3ImageToVideo / MiniMaxH3AddGuide, references from
  MiniMaxH3ReferenceToVideo) share these grids; their timeline starts where their frame sits.

The time origin of the targets ("cursor") is the text length plus the time span every reference
block occupies (`ref_t_span`); a keyframe at pixel frame `f` sits at `cursor + 5/3 f`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

FRAME_PER_TOKEN = (1, 4, 4, 4, 4)  # pixel frames per latent frame, repeating every five
FRAME_RESCALE = 5.0 / 3.0  # time units per pixel frame
VISUAL_COND_TIMESTEP = 0.999  # the timestep label of preserved video rows (their noise augmentation)
AUDIO_COND_TIMESTEP = 1.0
GRID_UNITS = 32.0  # the side of a square frame on the position grid
PATCH = (1, 2, 2)

# The segment kinds, their modality tag (the adaLN row within a timestep: 0 video, 1 text, 2 audio)
# and whether they hold video or audio rows.
SEGMENT_TAGS = {"text": 1, "cond": 0, "ref_img": 0, "video": 0, "cond_audio": 2, "ref_audio": 2, "audio": 2}
VIDEO_KINDS = ("cond", "ref_img", "video")
AUDIO_KINDS = ("cond_audio", "ref_audio", "audio")


class MiniMaxH3LayoutError(ValueError):
    """A latent, keyframe or reference block the packed sequence cannot hold."""


def time_shift_sigma(sigma: Any, from_shift: float, to_shift: float) -> Any:
    """A sigma of the schedule shifted by `from_shift` mapped to the one shifted by `to_shift`:
    undo `s b / (1 + (s - 1) b)` to the base grid `b`, then apply the other shift (SD3's shift)."""
    base = sigma / (from_shift + sigma * (1.0 - from_shift))
    return to_shift * base / (1.0 + (to_shift - 1.0) * base)


def patchify_video(latent: torch.Tensor, patch: Sequence[int] = PATCH) -> torch.Tensor:
    """[B, C, T, H, W] -> [B * t * h * w, C * pt * ph * pw] rows in (t, h, w) order, each row the
    patch's values channel-major (channel, then its pt x ph x pw pixels)."""
    b, c, t_full, h_full, w_full = latent.shape
    pt, ph, pw = patch
    t, h, w = t_full // pt, h_full // ph, w_full // pw
    x = latent.reshape(b, c, t, pt, h, ph, w, pw).permute(0, 2, 4, 6, 1, 3, 5, 7)  # [B, t, h, w, C, pt, ph, pw]
    return x.reshape(b * t * h * w, c * pt * ph * pw)


def unpatchify_video(rows: torch.Tensor, t: int, h: int, w: int, channels: int,
                     patch: Sequence[int] = PATCH) -> torch.Tensor:
    """The inverse of `patchify_video`: rows -> [B, C, t * pt, h * ph, w * pw]."""
    pt, ph, pw = patch
    x = rows.reshape(-1, t, h, w, channels, pt, ph, pw).permute(0, 4, 1, 5, 2, 6, 3, 7)
    return x.reshape(-1, channels, t * pt, h * ph, w * pw)


def pack_audio(latent: torch.Tensor) -> torch.Tensor:
    """[1, C, 2, T] -> [2 T, C]: channel 0's frames then channel 1's (the first sample only)."""
    if latent.ndim != 4:
        raise MiniMaxH3LayoutError(f"MiniMax H3: an audio latent is [batch, 32, 2, frames], got {tuple(latent.shape)}")
    _, c, ch, t = latent.shape
    return latent[0].permute(1, 2, 0).reshape(ch * t, c)


def unpack_audio(rows: torch.Tensor, channels: int = 2) -> torch.Tensor:
    """[2 T, C] -> [1, C, 2, T] (the inverse of `pack_audio`)."""
    t = rows.shape[0] // channels
    return rows.reshape(channels, t, rows.shape[-1]).permute(2, 0, 1).unsqueeze(0)


def _axis(dim: int, patch: int, sqrt_area: float) -> torch.Tensor:
    # `dim // patch` points spread over `GRID_UNITS * dim / sqrt_area`, centred on the square's middle
    ratio = dim / sqrt_area
    n = dim // patch
    return (torch.arange(n, dtype=torch.float64) * (ratio / n) + (1.0 - ratio) / 2.0) * GRID_UNITS


def frame_grid(latent_h: int, latent_w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One latent frame's 2x2-patch rows -> ([rows, 2] (h, w) positions, the w axis)."""
    area = math.sqrt(latent_h * latent_w)
    h_axis, w_axis = _axis(latent_h, 2, area), _axis(latent_w, 2, area)
    hh, ww = torch.meshgrid(h_axis, w_axis, indexing="ij")
    return torch.stack([hh.reshape(-1), ww.reshape(-1)], dim=-1), w_axis


def video_t_spans(latent_t: int) -> list[float]:
    """The time each latent frame spans (5/3 per pixel frame it stands for)."""
    return [FRAME_RESCALE * FRAME_PER_TOKEN[k % len(FRAME_PER_TOKEN)] for k in range(latent_t)]


def pixel_frames(latent_t: int) -> int:
    """The pixel frames `latent_t` latent frames stand for (1 + 4 + 4 + ...)."""
    return sum(FRAME_PER_TOKEN[k % len(FRAME_PER_TOKEN)] for k in range(latent_t))


def video_t_grid(latent_t: int, origin: float) -> torch.Tensor:
    """Each latent frame's start time: `origin` plus the spans before it."""
    spans = torch.tensor(video_t_spans(latent_t), dtype=torch.float64)
    return float(origin) + torch.cat([torch.zeros(1, dtype=torch.float64), spans[:-1].cumsum(0)])


def audio_grid(cursor: float, frames: int, w_low: float, w_high: float) -> torch.Tensor:
    """[2 frames, 3] positions of a stereo audio block starting at `cursor`."""
    g = torch.zeros(frames * 2, 3, dtype=torch.float64)
    g[:, 0] = (cursor + torch.arange(frames, dtype=torch.float64)).repeat(2)
    g[:frames, 2] = w_low
    g[frames:, 2] = w_high
    return g


def video_grid(latent_t: int, frame: torch.Tensor, cursor: float) -> torch.Tensor:
    """[latent_t * rows, 3] positions of a video block starting at `cursor`."""
    g = torch.empty(latent_t, frame.shape[0], 3, dtype=torch.float64)
    g[:, :, 0] = video_t_grid(latent_t, cursor)[:, None]
    g[:, :, 1:] = frame[None]
    return g.reshape(-1, 3)


def ref_t_span(block: Mapping[str, Any]) -> float:
    """The time a reference block occupies ahead of the targets."""
    kind = block.get("kind")
    if kind == "image":
        return 1.0
    if kind == "audio":
        return float(block["ref_audio_t"])
    if kind in ("video", "video_audio"):
        return max(float(block["ref_audio_t"]), sum(video_t_spans(int(block["latent_t"]))))
    raise MiniMaxH3LayoutError(f"MiniMax H3: unknown reference block kind {kind!r} (image, audio, video, video_audio)")


@dataclass
class PackedLayout:
    """The packed sequence of one (text length, latent shape, conditions) signature.

    `segments`: contiguous `(start, stop, kind)` spans; `position_ids` [S, 3] float64 (t, h, w);
    `signature` (text length, latent t / h / w, audio frames)."""

    seq_len: int
    segments: list[tuple[int, int, str]]
    position_ids: torch.Tensor
    signature: tuple[int, int, int, int, int]

    def segment(self, kind: str) -> tuple[int, int]:
        """The (start, stop) of the one segment of `kind` (the targets "audio" / "video")."""
        for a, b, k in self.segments:
            if k == kind:
                return a, b
        raise MiniMaxH3LayoutError(f"MiniMax H3: the packed sequence has no {kind!r} segment")


def build_layout(text_len: int, latent_t: int, latent_h: int, latent_w: int, audio_t: int,
                 keyframes: Sequence[Mapping[str, Any]] | None = None,
                 refs: Sequence[Mapping[str, Any]] | None = None) -> PackedLayout:
    """The packed layout (see the module doc). `latent_h` / `latent_w` are even (padded to the patch)."""
    if latent_h % 2 or latent_w % 2:
        raise MiniMaxH3LayoutError(f"MiniMax H3: latent height / width must be even here, got {latent_h} x {latent_w}")
    frame, w_axis = frame_grid(latent_h, latent_w)
    target_w = (float(w_axis[0]), float(w_axis[-1]))
    parts: list[tuple[str, torch.Tensor]] = []
    text = torch.zeros(text_len, 3, dtype=torch.float64)
    text[:, 0] = torch.arange(text_len, dtype=torch.float64)
    parts.append(("text", text))

    cursor = float(text_len)
    for block in refs or ():
        cursor += ref_t_span(block)

    for keyframe in keyframes or ():
        cond_t = cursor + FRAME_RESCALE * float(keyframe["resolved_frame_index"])
        latent = keyframe.get("latent")
        if latent is not None:
            parts.append(("cond", video_grid(int(latent.shape[2]), frame, cond_t)))
        audio = keyframe.get("audio_latent")
        if audio is not None:
            parts.append(("cond_audio", audio_grid(cond_t, int(audio.shape[-1]), *target_w)))

    ref_cursor = float(text_len)
    for block in refs or ():
        kind = block.get("kind")
        if kind == "image":
            r_frame, _ = frame_grid(int(block["latent_h"]), int(block["latent_w"]))
            g = torch.empty(r_frame.shape[0], 3, dtype=torch.float64)
            g[:, 0] = ref_cursor
            g[:, 1:] = r_frame
            parts.append(("ref_img", g))
            ref_cursor += 1.0
        elif kind == "audio":
            frames = int(block["ref_audio_t"])
            if frames > 0:
                parts.append(("ref_audio", audio_grid(ref_cursor, frames, *target_w)))
            ref_cursor += float(frames)
        elif kind in ("video", "video_audio"):
            frames, vt = int(block["ref_audio_t"]), int(block["latent_t"])
            r_frame, r_w = frame_grid(int(block["latent_h"]), int(block["latent_w"]))
            if frames > 0:  # the block's soundtrack rows come right before its video rows
                parts.append(("ref_audio", audio_grid(ref_cursor, frames, float(r_w[0]), float(r_w[-1]))))
            parts.append(("ref_img", video_grid(vt, r_frame, ref_cursor)))
            ref_cursor += max(float(frames), sum(video_t_spans(vt)))
        else:
            ref_t_span(block)  # raises for the unknown kind

    parts.append(("audio", audio_grid(cursor, audio_t, *target_w)))
    parts.append(("video", video_grid(latent_t, frame, cursor)))

    segments, start = [], 0
    for kind, grid in parts:
        segments.append((start, start + grid.shape[0], kind))
        start += grid.shape[0]
    return PackedLayout(seq_len=start, segments=segments, position_ids=torch.cat([g for _, g in parts]),
                        signature=(text_len, latent_t, latent_h, latent_w, audio_t))


def pdd_head_weights(heads: int, start: int, stop: int, flow_shift: float) -> torch.Tensor:
    """The weights of heads `start..stop-1` of a PDD head bank (the distilled files' output heads,
    one per slice of the base grid): each head's share of the step's time on the schedule shifted
    by `flow_shift`, normalised to sum to 1 (float64)."""
    grid = torch.linspace(1.0, 0.0, heads + 1, dtype=torch.float64)
    dt = (1.0 - flow_shift * grid / (1.0 + (flow_shift - 1.0) * grid)).diff()[start:stop]
    return dt / dt.sum()


def pdd_head_span(sigma: float, sample_sigmas: torch.Tensor, heads: int, shift: float) -> tuple[int, int]:
    """The heads a step from `sigma` to the schedule's next sigma spans: the base-grid positions of
    both (the schedule shifted by `shift` undone) scaled to the bank, at least one head."""
    index = int((sample_sigmas - sigma).abs().argmin())
    sigma_next = float(sample_sigmas[min(index + 1, sample_sigmas.shape[0] - 1)])
    start, stop = (round(float(1.0 - time_shift_sigma(s, shift, 1.0)) * heads) for s in (float(sigma), sigma_next))
    start = min(start, heads - 1)
    return start, max(stop, start + 1)
