"""SCAIL-2's identity masks: SAM 3 video tracks rendered as colour masks, and colour masks turned
into the 28-channel binary stream the network's mask embedding takes. Behaviour as ComfyUI's
`comfy_extras/nodes_scail.py` (`_render_colored_masks`, `_render_mask_as_identity`,
`_first_appearance_cx_area`, `_subset_track_data`, `_extract_mask_to_28ch`) and the bit packing of
`comfy/ldm/sam3/tracker.py` (`pack_masks` / `unpack_masks`); written here.

SAM3_TRACK_DATA, the contract a SAM 3 video tracker (SAM3_VideoTrack) produces and
SCAIL2ColoredMask reads, is a dict:

- `"packed_masks"`: `torch.uint8` `[T, N, Hm, Wm / 8]`, the binary mask of each of N tracked objects
  in each of T frames, 8 columns a byte, least significant bit first (column 8k + i is bit i of
  byte k; `pack_masks` / `unpack_masks` here), Wm a multiple of 8; or None when nothing was tracked.
  Objects are in the tracker's order (its object ids).
- `"orig_size"`: `(H, W)`, the video's size; masks of another size are resized (nearest) to it.
- `"n_frames"`: the frame count, read when `packed_masks` is None.
- `"scores"` (optional): a list of N per-object scores, kept in step when objects are reordered or
  selected.
Other keys pass through unchanged.

Colour masks: background black (animation-mode driving masks, replacement-mode reference masks)
or white, object i painted in palette colour `i % 6` (blue, red, green, magenta, cyan, yellow, the
colours SCAIL-2 was trained on), the lower index winning where objects overlap.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

PALETTE = ((0.0, 0.0, 1.0), (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (1.0, 0.0, 1.0), (0.0, 1.0, 1.0), (1.0, 1.0, 0.0))
ON_THRESHOLD = 225.0 / 255.0  # a colour channel is "on" above this
MASK_CHANNELS = 28  # 7 colour classes x 4 frames


def pack_masks(masks: torch.Tensor) -> torch.Tensor:
    """Binary masks `[..., H, W]` (W a multiple of 8; > 0 is set) -> `uint8 [..., H, W / 8]`."""
    if masks.shape[-1] % 8:
        raise ValueError(f"pack_masks: the mask width {masks.shape[-1]} is not a multiple of 8")
    bits = (masks > 0).reshape(*masks.shape[:-1], -1, 8).to(torch.int32)
    weights = 1 << torch.arange(8, device=masks.device, dtype=torch.int32)
    return (bits * weights).sum(-1).to(torch.uint8)


def unpack_masks(packed: torch.Tensor) -> torch.Tensor:
    """`uint8 [..., H, W / 8]` -> bool `[..., H, W]` (the inverse of `pack_masks`)."""
    shifts = torch.arange(8, device=packed.device, dtype=torch.int32)
    bits = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & 1
    return bits.reshape(*packed.shape[:-1], -1).bool()


def first_appearance(packed: torch.Tensor) -> tuple[list[int], list[float], list[float]]:
    """Per object: the first frame it appears in (T when never), and its centroid column (over the
    mask width) and area (over the mask area) in that frame."""
    masks = unpack_masks(packed)  # [T, N, Hm, Wm]
    t, _n, hm, wm = masks.shape
    columns = masks.sum(dim=-2, dtype=torch.int32).double()  # [T, N, Wm]
    area_t = columns.sum(dim=-1)  # [T, N]
    cx_t = (columns * torch.arange(wm, dtype=torch.float64)).sum(dim=-1) / area_t.clamp(min=1)
    frames = torch.arange(t).unsqueeze(1)
    first = torch.where(area_t > 0, frames, t).amin(dim=0)  # [N]
    at = first.clamp(max=t - 1).unsqueeze(0)
    return (first.tolist(), (cx_t.gather(0, at).squeeze(0) / wm).tolist(),
            (area_t.gather(0, at).squeeze(0) / (hm * wm)).tolist())


def subset(track_data: dict[str, Any], indices: Sequence[int]) -> dict[str, Any]:
    """The track data of the objects `indices`, in that order (no objects: `packed_masks` None)."""
    out = dict(track_data)
    packed = track_data["packed_masks"]
    if packed is None or not indices:
        out["packed_masks"] = None
        if "scores" in out:
            out["scores"] = []
        return out
    out["packed_masks"] = packed[:, list(indices)].contiguous()
    scores = track_data.get("scores")
    if scores is not None:
        out["scores"] = [scores[i] for i in indices if i < len(scores)]
    return out


def ordered(track_data: dict[str, Any], sort_by: str, object_indices: str) -> dict[str, Any]:
    """The objects sorted (`left_to_right`: by first frame, then centroid column; `area`: by first
    frame, then larger first; `none`: the tracker's order), then those whose indices the
    comma-separated `object_indices` lists (empty: all; non-numbers and indices out of range dropped)."""
    packed = track_data["packed_masks"]
    if sort_by != "none" and packed is not None and packed.shape[1] > 0:
        first, cx, area = first_appearance(packed)
        if sort_by == "left_to_right":
            order = sorted(range(len(cx)), key=lambda i: (first[i], cx[i]))
        else:
            order = sorted(range(len(area)), key=lambda i: (first[i], -area[i]))
        track_data = subset(track_data, order)
    if object_indices.strip():
        wanted = [int(i.strip()) for i in object_indices.split(",") if i.strip().isdigit()]
        packed = track_data.get("packed_masks")
        count = packed.shape[1] if packed is not None else 0
        track_data = subset(track_data, [i for i in wanted if 0 <= i < count])
    return track_data


def _background(background: str) -> tuple[float, float, float]:
    return (1.0, 1.0, 1.0) if background.startswith("white") else (0.0, 0.0, 0.0)


def render_colored(track_data: dict[str, Any], background: str = "black") -> torch.Tensor:
    """Track data -> colour mask video `[T, H, W, 3]` (module docstring)."""
    packed = track_data["packed_masks"]
    h, w = (int(v) for v in track_data["orig_size"])
    bg = _background(background)
    if packed is None or packed.shape[1] == 0:
        frames = int(track_data.get("n_frames", 1)) if packed is None else packed.shape[0]
        return torch.tensor(bg, dtype=torch.float32).expand(frames, h, w, 3).clone()
    masks = unpack_masks(packed)  # [T, N, Hm, Wm]
    label = torch.zeros(masks.shape[0], *masks.shape[2:], dtype=torch.uint8)
    for i in reversed(range(masks.shape[1])):  # the lowest index painted last: it wins on overlap
        label.masked_fill_(masks[:, i], i % len(PALETTE) + 1)
    if label.shape[-2:] != (h, w):
        label = F.interpolate(label.unsqueeze(1), size=(h, w), mode="nearest").squeeze(1)
    table = torch.tensor((bg,) + PALETTE, dtype=torch.float32)
    return table[label.long()]


def render_identity(mask: torch.Tensor, background: str = "black") -> torch.Tensor:
    """A plain MASK `[B, H, W]` (or `[H, W]`) as one identity (palette colour 0 where > 0.5) ->
    `[B, H, W, 3]`; a batch is several views of that subject."""
    if mask.ndim == 2:
        mask = mask.unsqueeze(0)
    mask = mask.to(torch.float32)
    color = torch.tensor(PALETTE[0]).view(1, 1, 1, 3)
    bg = torch.tensor(_background(background)).view(1, 1, 1, 3)
    return torch.where((mask > 0.5).unsqueeze(-1), color, bg).expand(*mask.shape, 3).clone()


def mask_to_28ch(rgb: torch.Tensor) -> torch.Tensor:
    """A colour mask video `[T, H, W, 3]` in 0..1 (T = 4k + 1) -> `[1, (T - 1) / 4 + 1, 28, h, w]`:
    per frame 7 binary classes from the channels above 225/255 (white, red, green, blue, yellow,
    magenta, cyan), area-resized to the size of three halvings rounding up (the VAE's 8x), the first
    frame repeated to 4 and each group of 4 frames stacked along channels (frame-major)."""
    t, h, w, _ = rgb.shape
    if (t - 1) % 4:
        raise ValueError(f"SCAIL-2 masks: {t} frames is no video of 4k + 1 frames")
    planes = rgb.movedim(-1, 1).float()
    r, g, b = ((planes[:, i:i + 1] > ON_THRESHOLD).float() for i in range(3))
    nr, ng, nb = 1 - r, 1 - g, 1 - b
    classes = torch.cat([r * g * b, r * ng * nb, nr * g * nb, nr * ng * b, r * g * nb, r * ng * b, nr * g * b], dim=1)
    h_lat, w_lat = h, w
    for _ in range(3):
        h_lat, w_lat = (h_lat + 1) // 2, (w_lat + 1) // 2
    classes = F.interpolate(classes, size=(h_lat, w_lat), mode="area")
    padded = torch.cat([classes[:1].repeat(4, 1, 1, 1), classes[1:]], dim=0)  # [T + 3, 7, h, w]
    return padded.reshape((t - 1) // 4 + 1, MASK_CHANNELS, h_lat, w_lat).unsqueeze(0)
