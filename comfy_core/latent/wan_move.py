"""Wan-Move's latent trajectory guidance (Chu et al. 2025, "Wan-Move: Motion-controllable Video
Generation via Latent Trajectory Guidance"; ali-vilab/Wan-Move, wan/modules/trajectory.py), as
today's ComfyUI applies it (comfy_extras/nodes_wanmove.py), written here.

Wan-Move is a fine-tuned Wan 2.1 I2V 14B with no change to the network: the motion is in the
image conditioning. The start image's latent features are copied along point tracks into the
later latent frames of `concat_latent_image`, so the model sees where each point must be.

The TRACKS wire value is ComfyUI's dict: `track_path` float32 `[T, N, 2]`, (x, y) in pixels of
the video frame, one row per video frame; `track_visibility` bool `[T, N]` (optional: absent
means all visible). `checked_tracks` reads it (a `[T, 1]` visibility, which ComfyUI's own mask
path makes, applies to every track).

- `generate_tracks`: N parallel tracks along a line or a quadratic Bezier curve from a start to
  an end point (normalised to the frame), eased in time, spread perpendicular to the path by
  `spread * (width + height) / 2` pixels between neighbours, centred on the path.
- `latent_track_positions`: every 4th video frame (the one each latent frame samples, the first
  included) -> each track's latent cell `(row, col) = (floor(y / 8), floor(x / 8))`, or -1 where
  the track is hidden or outside the frame.
- `move_features`: for each track and latent frame t >= 1 where it is placed, the cell it is at
  becomes `dst + (src - dst) * strength`, `src` the feature of the track's cell in latent frame 0.
  Where several tracks land on one cell, ComfyUI shuffles the tracks with the global RNG and the
  last written wins, so a random one does; here the last in track order wins (one of ComfyUI's
  outcomes, the same on every run). A track hidden at frame 0 has cell (-1, -1), which indexes
  the last row and column of frame 0: ComfyUI's (and Wan-Move's) reading, kept.
- `draw_tracks`: WanMoveVisualizeTracks's picture: per frame a filled circle per visible track
  (five colours in turn, alpha `int(255 * opacity)`), then a trail of the last `history` points
  fading along its length in alpha and width, each layer blended over the frame by its alpha.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

INTERPOLATIONS = ("linear", "ease_in", "ease_out", "ease_in_out", "constant")
PALETTE = ((102, 153, 255), (0, 255, 255), (255, 255, 0), (255, 102, 204), (0, 255, 0))
TIME_STRIDE = 4  # video frames per latent frame (after the first)
SPACE_STRIDE = 8  # pixels per latent cell (Wan 2.1's VAE)


class TracksError(ValueError):
    """Tracks (or a mask for them) that do not have the shapes the Wan-Move nodes read."""


def eased(u: torch.Tensor, interpolation: str) -> torch.Tensor:
    """Progress along the path at times `u` in 0..1: linear, quadratic ease in / out,
    smoothstep (`ease_in_out`), or none (`constant`: every frame at the start)."""
    if interpolation == "linear":
        return u
    if interpolation == "ease_in":
        return u ** 2
    if interpolation == "ease_out":
        return 1 - (1 - u) ** 2
    if interpolation == "ease_in_out":
        return u * u * (3 - 2 * u)
    if interpolation == "constant":
        return torch.zeros_like(u)
    raise TracksError(f"interpolation must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}")


def generate_tracks(width: int, height: int, start: tuple[float, float], end: tuple[float, float],
                    num_frames: int, num_tracks: int, spread: float, *, mid: tuple[float, float] | None = None,
                    interpolation: str = "linear") -> torch.Tensor:
    """`num_tracks` tracks of `num_frames` points `[F, N, 2]` (float32 pixels). The centre path is
    `P0 + (P2 - P0) s` or, with `mid`, the Bezier `(1-s)^2 P0 + 2 (1-s) s P1 + s^2 P2`, at
    `s = eased(linspace(0, 1, F))`; track k is offset by `(k - (N-1)/2) * spread * (W+H)/2` along
    the unit normal `(-t_y, t_x) / |t|` of the path's tangent t (`(1, 0)` where t is zero)."""
    p0 = (start[0] * width, start[1] * height)
    p2 = (end[0] * width, end[1] * height)
    s = eased(torch.linspace(0, 1, num_frames), interpolation)  # float32, as the centre path
    if mid is not None:
        p1 = (mid[0] * width, mid[1] * height)
        r = 1 - s
        centre = [r ** 2 * p0[i] + 2 * r * s * p1[i] + s ** 2 * p2[i] for i in (0, 1)]
        tangent = [2 * r * (p1[i] - p0[i]) + 2 * s * (p2[i] - p1[i]) for i in (0, 1)]
    else:
        centre = [p0[i] + (p2[i] - p0[i]) * s for i in (0, 1)]
        tangent = [torch.full_like(s, p2[i] - p0[i]) for i in (0, 1)]
    # The offsets are taken in double precision from the float32 path, then stored as float32.
    cx, cy = (c.double() for c in centre)
    tx, ty = (t.double() for t in tangent)
    norm = torch.sqrt(tx ** 2 + ty ** 2)
    moving = norm > 0
    safe = torch.where(moving, norm, torch.ones_like(norm))
    nx = torch.where(moving, -ty / safe, torch.ones_like(norm))
    ny = torch.where(moving, tx / safe, torch.zeros_like(norm))
    step = spread * (width + height) / 2
    offsets = (torch.arange(num_tracks, dtype=torch.float64) - (num_tracks - 1) / 2) * step  # [N]
    x = cx[:, None] + nx[:, None] * offsets[None]
    y = cy[:, None] + ny[:, None] * offsets[None]
    return torch.stack([x, y], dim=-1).float()  # [F, N, 2]


def mask_visibility(mask: torch.Tensor, frames: int, tracks: int) -> torch.Tensor:
    """A MASK `[M, H, W]` -> bool `[frames, tracks]`: a frame is visible where its mask has any
    positive value, for every track. The mask must have one frame per track frame."""
    if mask.shape[0] != frames:
        raise TracksError(f"the mask has {mask.shape[0]} frames, the tracks {frames}: one mask frame per track "
                          "frame says which frames are visible")
    return (mask > 0).flatten(1).any(dim=1)[:, None].expand(frames, tracks).clone()


def tracks_value(path: torch.Tensor, visibility: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The TRACKS wire value; all visible when `visibility` is None."""
    if visibility is None:
        visibility = torch.ones(path.shape[:2], dtype=torch.bool, device=path.device)
    return {"track_path": path, "track_visibility": visibility}


def path_from_points(tracks: Sequence[Sequence[Mapping[str, Any]]]) -> torch.Tensor:
    """Tracks of `{"x", "y"}` points (as the track editors write them) -> `[T, N, 2]` float32, T
    the first track's length; longer tracks are cut to it (as ComfyUI reads them), shorter ones
    are an error."""
    if not tracks or not tracks[0]:
        raise TracksError("no tracks: expected a track (a list of {\"x\", \"y\"} points) or a list of tracks")
    frames = len(tracks[0])
    short = [i for i, track in enumerate(tracks) if len(track) < frames]
    if short:
        raise TracksError(f"track {short[0]} has {len(tracks[short[0]])} points, fewer than the first track's "
                          f"{frames}: every track needs a point per frame")
    rows = [[[float(track[f]["x"]), float(track[f]["y"])] for track in tracks] for f in range(frames)]
    return torch.tensor(rows, dtype=torch.float32)


def checked_tracks(value: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A TRACKS value -> (path `[T, N, 2]` float, visibility bool `[T, N]`)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("track_path"), torch.Tensor):
        raise TracksError("TRACKS must be a dict with a 'track_path' tensor [frames, tracks, 2]")
    path = value["track_path"]
    if path.ndim != 3 or path.shape[-1] != 2 or 0 in path.shape[:2] or not path.is_floating_point():
        raise TracksError(f"track_path must be a float tensor [frames, tracks, 2], got {list(path.shape)} "
                          f"{path.dtype}")
    visibility = value.get("track_visibility")
    if visibility is None:
        return path, torch.ones(path.shape[:2], dtype=torch.bool, device=path.device)
    if (not isinstance(visibility, torch.Tensor) or visibility.ndim != 2 or visibility.shape[0] != path.shape[0]
            or visibility.shape[1] not in (1, path.shape[1])):
        raise TracksError(f"track_visibility must be [frames, tracks] ({list(path.shape[:2])}) or [frames, 1], "
                          f"got {list(getattr(visibility, 'shape', []))}")
    return path, (visibility != 0).expand(path.shape[0], path.shape[1])


def concat_tracks(first: Any, second: Any) -> dict[str, torch.Tensor]:
    """Both sets of tracks side by side (`[T, N1 + N2, 2]`); they must have as many frames."""
    path_a, vis_a = checked_tracks(first)
    path_b, vis_b = checked_tracks(second)
    if path_a.shape[0] != path_b.shape[0]:
        raise TracksError(f"the tracks have {path_a.shape[0]} and {path_b.shape[0]} frames: concatenated tracks "
                          "need as many frames")
    return tracks_value(torch.cat([path_a, path_b.to(path_a)], dim=1), torch.cat([vis_a, vis_b], dim=1))


def latent_track_positions(path: torch.Tensor, visibility: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Tracks `[T, N, 2]` -> latent cells `[N, (T-1)//4 + 1, 2]` long, (row, col) of every 4th video
    frame (Wan-Move's "sample" time strategy), -1 where the track is hidden or outside the
    `width` x `height` frame."""
    points = path[::TIME_STRIDE].float()  # [T', N, 2]
    seen = visibility[::TIME_STRIDE]
    x, y = points[..., 0], points[..., 1]
    inside = seen & (x >= 0) & (y >= 0) & (x < width) & (y < height)
    cells = torch.stack([torch.div(y, SPACE_STRIDE, rounding_mode="floor"),
                         torch.div(x, SPACE_STRIDE, rounding_mode="floor")], dim=-1)
    cells = torch.where(inside[..., None], cells, torch.full_like(cells, -1)).long()
    return cells.transpose(0, 1).contiguous()  # [N, T', 2]


def move_features(latent: torch.Tensor, positions: torch.Tensor, strength: float) -> torch.Tensor:
    """A copy of `latent` `[B, C, T, h, w]` with the start frame's features moved along the
    tracks' latent cells `positions` `[N, T', 2]` (T' <= T), every batch item alike."""
    out = latent.clone()
    frames, h, w = latent.shape[2:]
    if positions.shape[1] > frames:
        raise TracksError(f"{positions.shape[1]} latent frames of tracks for a latent of {frames}")
    target = positions[:, 1:]  # [N, T'-1, 2]
    placed = (target >= 0).all(dim=-1)
    track, later = placed.nonzero(as_tuple=True)  # track-major, as ComfyUI's nonzero
    if track.numel() == 0:
        return out
    rows, cols = target[track, later, 0], target[track, later, 1]
    if bool((rows >= h).any() or (cols >= w).any()):
        raise TracksError(f"a track's latent cell lies outside the {h} x {w} latent: the frame size and the "
                          "latent's do not agree")
    frame = later + 1
    # One write per cell: the last (track, frame) entry landing on it.
    key = (frame * h + rows) * w + cols
    cells, inverse = torch.unique(key, return_inverse=True)
    order = torch.arange(key.numel())
    last = torch.full((cells.numel(),), -1, dtype=torch.long).scatter_reduce(0, inverse, order, reduce="amax")
    track, frame, rows, cols = track[last], frame[last], rows[last], cols[last]
    # -1 (hidden at frame 0) indexes the last row / column, as ComfyUI's indexing does.
    src_rows, src_cols = positions[track, 0, 0] % h, positions[track, 0, 1] % w
    src = latent[:, :, 0, src_rows, src_cols]  # [B, C, K]
    dst = latent[:, :, frame, rows, cols]
    out[:, :, frame, rows, cols] = dst + (src - dst) * strength
    return out


def _blend(base: Any, layer: Any) -> Any:
    """An RGBA layer over an RGB frame (float arrays), by the layer's alpha."""
    import numpy as np

    pixels = np.asarray(layer)
    alpha = pixels[:, :, 3:4] / 255.0
    return pixels[:, :, :3] * alpha + base * (1 - alpha)


def _draw_trail(layer: Any, points: Any, colour: tuple[int, int, int], opacity: float, line_width: int) -> None:
    """A trail from the newest point back to the oldest: one-pixel steps along each segment,
    alpha `255 (1 - r) opacity` and width `line_width (1 - r)` (at least 1), r the fraction of
    the trail's length already walked."""
    from PIL import ImageDraw

    draw = ImageDraw.Draw(layer, "RGBA")
    points = points[::-1]
    lengths = [float(((points[i + 1][0] - points[i][0]) ** 2 + (points[i + 1][1] - points[i][1]) ** 2) ** 0.5)
               for i in range(len(points) - 1)]
    total = sum(lengths)
    if total == 0:
        return
    walked = 0.0
    for (a, b), length in zip(zip(points[:-1], points[1:]), lengths):
        steps = max(int(length), 1)
        for i in range(steps):
            ratio = (walked + (i / steps) * length) / total
            x = int(a[0] + (b[0] - a[0]) * i / steps)
            y = int(a[1] + (b[1] - a[1]) * i / steps)
            draw.line([(x, y), (x + 1, y)], fill=(*colour, int(255 * (1 - ratio) * opacity)),
                      width=max(int(line_width * (1 - ratio)), 1))
        walked += length


def draw_tracks(frames: torch.Tensor, path: torch.Tensor, visibility: torch.Tensor, *, history: int,
                radius: int, opacity: float, line_width: int) -> torch.Tensor:
    """IMAGE frames `[T, H, W, 3]` (one per track frame) with the tracks drawn on (module
    docstring); pixels are truncated to 8 bits, as ComfyUI's picture is."""
    import numpy as np
    from PIL import Image, ImageDraw

    video = (frames.float() * 255.0).to(torch.uint8).cpu().numpy()
    points = path.long().cpu().numpy()
    shown = visibility.cpu().numpy()
    count, height, width = video.shape[:3]
    fill_alpha = int(255 * opacity)
    out = []
    for t in range(count):
        frame = video[t].astype(np.float32)
        circles = Image.new("RGBA", (width, height), (0, 0, 0, 0))
        pen = ImageDraw.Draw(circles)
        trails = []
        for n in range(points.shape[1]):
            if not shown[t, n]:
                continue
            x, y = points[t, n]
            colour = PALETTE[n % len(PALETTE)]
            pen.ellipse((x - radius, y - radius, x + radius, y + radius), fill=(*colour, fill_alpha))
            tail = points[max(t - history, 0):t + 1, n]
            if len(tail) > 1:
                trails.append((tail, colour))
        frame = _blend(frame, circles)
        if trails:
            lines = Image.new("RGBA", (width, height), (0, 0, 0, 0))
            for tail, colour in trails:
                _draw_trail(lines, tail, colour, opacity, line_width)
            frame = _blend(frame, lines)
        out.append(frame.astype(np.uint8))
    return torch.from_numpy(np.stack(out)).float() / 255.0
