"""SAM 3.1's object multiplexing: up to M objects share one pass of the propagation decoder and the
memory encoder ("buckets" of M slots), and the mask post-processing the video tracker applies
between frames.

- `MultiplexState`: object i sits in bucket i // M, slot i % M; `mux` gathers per-object tensors
  `[N, ...]` into `[buckets, M, ...]` (empty slots zero), `demux` the inverse.
- `MultiplexMaskDecoder`: SAM's two-way mask decoder with M object-score, M IoU and M x 3 mask
  tokens (3 candidate masks per object, no single-mask token); each object's mask tokens get a
  per-slot "valid" / "invalid" embedding added; the 3 hypernetwork MLPs are shared by the objects.
- `mask_overlap` (max of IoU and intersection over the smaller area), mask NMS, and
  `fill_holes` (background holes and foreground sprinkles up to an area, 8-connected components).

Behaviour and parameter names as ComfyUI's `comfy/ldm/sam3/tracker.py` (`MultiplexState`,
`MultiplexMaskDecoder`, `_compute_mask_overlap`, `_nms_masks`, `fill_holes_in_mask_scores`),
read there and written here.
"""
from __future__ import annotations

import torch
from torch import nn

from comfy_core.models.sam3.detector import MLP
from comfy_core.models.sam3.sam_heads import LayerNorm2d, TwoWayTransformer

CANDIDATES = 3  # masks per object


class MultiplexState:
    """Which bucket and slot each of `count` objects occupies (module docstring)."""

    def __init__(self, count: int, slots: int) -> None:
        self.slots = slots
        self.count = 0
        self.buckets = 0
        self.resize(count)

    def resize(self, count: int) -> None:
        self.count = count
        self.buckets = -(-count // self.slots)

    def add(self, n: int) -> None:
        self.resize(self.count + n)

    def mux(self, x: torch.Tensor) -> torch.Tensor:
        """`[N, ...]` -> `[buckets, M, ...]`, empty slots zero."""
        out = x.new_zeros((self.buckets * self.slots,) + tuple(x.shape[1:]))
        out[:self.count] = x
        return out.view((self.buckets, self.slots) + tuple(x.shape[1:]))

    def demux(self, x: torch.Tensor) -> torch.Tensor:
        """`[buckets, M, ...]` -> `[N, ...]`."""
        return x.reshape((-1,) + tuple(x.shape[2:]))[:self.count]

    def valid(self) -> torch.Tensor:
        """bool `[buckets, M]`: the occupied slots."""
        return (torch.arange(self.buckets * self.slots) < self.count).view(self.buckets, self.slots)


def pad_buckets(x: torch.Tensor, buckets: int) -> torch.Tensor:
    """`[b, ...]` memory from a frame with fewer buckets, zero-padded to `buckets`."""
    if x.shape[0] >= buckets:
        return x
    return torch.cat([x, x.new_zeros((buckets - x.shape[0],) + tuple(x.shape[1:]))], 0)


class MultiplexMaskDecoder(nn.Module):
    def __init__(self, dim: int, ffn: int, depth: int, slots: int) -> None:
        super().__init__()
        self.slots = slots
        self.transformer = TwoWayTransformer(dim, ffn, depth)
        self.obj_score_token = nn.Embedding(slots, dim)
        self.iou_token = nn.Embedding(slots, dim)
        self.mask_tokens = nn.Embedding(slots * CANDIDATES, dim)
        self.output_upscaling = nn.Sequential(
            nn.ConvTranspose2d(dim, dim // 4, 2, stride=2), LayerNorm2d(dim // 4), nn.GELU(),
            nn.ConvTranspose2d(dim // 4, dim // 8, 2, stride=2), nn.GELU())
        self.conv_s0 = nn.Conv2d(dim, dim // 8, 1)
        self.conv_s1 = nn.Conv2d(dim, dim // 4, 1)
        self.output_hypernetworks_mlps = nn.ModuleList(MLP([dim, dim, dim, dim // 8]) for _ in range(CANDIDATES))
        self.iou_prediction_head = MLP([dim, dim, dim, CANDIDATES])
        self.pred_obj_score_head = MLP([dim, dim, dim, 1])

    def forward(self, image: torch.Tensor, image_pe: torch.Tensor, slot_embed: torch.Tensor,
                high_res: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """image `[B, C, h, w]` (B buckets; no prompts: the dense prompt is zero), image_pe `[1, C, h, w]`,
        slot_embed `[B, M, C]`, high_res the neck's 4x / 2x levels -> (mask logits `[B, M, 3, 4h, 4w]`,
        IoU `[B, M, 3]`, the first mask token `[B, M, C]`, object logits `[B, M, 1]`)."""
        b, c, h, w = image.shape
        m, dt = self.slots, image.dtype
        masks_in = self.mask_tokens.weight.to(dt).view(1, m, CANDIDATES, c) + slot_embed.to(dt).unsqueeze(2)
        heads = torch.cat([self.obj_score_token.weight, self.iou_token.weight]).to(dt).unsqueeze(0).expand(b, -1, -1)
        tokens = torch.cat([heads, masks_in.flatten(1, 2)], 1)  # [B, 2M + 3M, C]
        hs, src = self.transformer(image.flatten(2).permute(0, 2, 1),
                                   image_pe.to(dt).expand(b, -1, -1, -1).flatten(2).permute(0, 2, 1), tokens)
        mask_out = hs[:, 2 * m:2 * m + m * CANDIDATES].reshape(b, m, CANDIDATES, c)
        src = src.permute(0, 2, 1).reshape(b, c, h, w)
        dc1, ln1, act1, dc2, act2 = self.output_upscaling
        up = act1(ln1(dc1(src) + self.conv_s1(high_res[1])))
        up = act2(dc2(up) + self.conv_s0(high_res[0]))  # [B, C / 8, 4h, 4w]
        hyper = torch.stack([mlp(mask_out[:, :, i]) for i, mlp in enumerate(self.output_hypernetworks_mlps)], 2)
        masks = (hyper.flatten(1, 2) @ up.flatten(2)).view(b, m, CANDIDATES, up.shape[2], up.shape[3])
        iou = self.iou_prediction_head(hs[:, m:2 * m])
        obj = self.pred_obj_score_head(hs[:, :m])
        return masks, iou, mask_out[:, :, 0], obj


def mask_overlap(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Masks `[A, ...]`, `[B, ...]` (> 0 is inside) -> `[A, B]`: max(IoU, intersection / smaller area)."""
    fa, fb = (a > 0).flatten(1).float(), (b > 0).flatten(1).float()
    inter = fa @ fb.T
    area_a, area_b = fa.sum(1, keepdim=True), fb.sum(1, keepdim=True).T
    iou = inter / (area_a + area_b - inter).clamp(min=1)
    iom = inter / torch.minimum(area_a, area_b).clamp(min=1)
    return torch.maximum(iou, iom)


def nms_masks(masks: torch.Tensor, scores: torch.Tensor, threshold: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy NMS by `mask_overlap`, best score first -> the kept masks and scores, best first."""
    order = scores.argsort(descending=True)
    masks, scores = masks[order], scores[order]
    keep: list[int] = []
    for i in range(masks.shape[0]):
        if keep and mask_overlap(masks[i:i + 1], masks[keep]).max() >= threshold:
            continue
        keep.append(i)
    return masks[keep], scores[keep]


def _component_areas(binary: torch.Tensor) -> torch.Tensor:
    """bool `[B, 1, H, W]` -> int `[B, 1, H, W]`: each set pixel's 8-connected component's area (0 elsewhere)."""
    import numpy as np
    from scipy import ndimage

    out = np.zeros(binary.shape, dtype=np.int64)
    for i in range(binary.shape[0]):
        plane = binary[i, 0].cpu().numpy()
        labels, n = ndimage.label(plane, structure=np.ones((3, 3), dtype=bool))
        if n:
            sizes = np.bincount(labels.ravel())
            sizes[0] = 0
            out[i, 0] = sizes[labels]
    return torch.from_numpy(out).to(binary.device)


def fill_holes(mask: torch.Tensor, max_area: int) -> torch.Tensor:
    """Mask logits `[B, 1, H, W]`: background components of at most `max_area` pixels become 0.1
    (filled), then foreground components of at most min(`max_area`, half the foreground) -0.1."""
    if max_area <= 0:
        return mask
    background = mask <= 0
    mask = torch.where(background & (_component_areas(background) <= max_area),
                       torch.tensor(0.1, dtype=mask.dtype, device=mask.device), mask)
    foreground = mask > 0
    limit = (foreground.sum(dim=(2, 3), keepdim=True) // 2).clamp(max=max_area)
    return torch.where(foreground & (_component_areas(foreground) <= limit),
                       torch.tensor(-0.1, dtype=mask.dtype, device=mask.device), mask)


def non_overlap_constraint(low_res: torch.Tensor) -> torch.Tensor:
    """Mask logits `[N, 1, h, w]`: an object that keeps under 30 % of its area where it is not the
    strongest is clamped to at most -10 (ComfyUI's `_deferred_memory_encode`)."""
    n = low_res.shape[0]
    if n <= 1:
        return low_res
    lr = low_res[:, 0]
    strongest = lr.argmax(0, keepdim=True) == torch.arange(n, device=lr.device)[:, None, None]
    before = (lr > 0).sum(dim=(-1, -2)).float().clamp(min=1)
    after = ((lr > 0) & strongest).sum(dim=(-1, -2)).float()
    keep = (after / before) >= 0.3
    return torch.where(keep[:, None, None, None], low_res, low_res.clamp(max=-10.0))


def suppress_recently_occluded(low_res: torch.Tensor, last_occluded: torch.Tensor, frame: int,
                               threshold: float = 0.3) -> torch.Tensor:
    """Of two overlapping tracks (`mask_overlap` >= `threshold`) that have both been occluded before,
    the one occluded more recently is set to -10; `last_occluded` `[N]` (-1: never) is updated in
    place with this frame for the suppressed and the empty ones. Returns the masks."""
    n = low_res.shape[0]
    if n <= 1:
        return low_res
    binary = low_res[:, 0] > 0
    pairs = torch.triu(mask_overlap(low_res[:, 0], low_res[:, 0]) >= threshold, diagonal=1)
    li, lj = last_occluded.unsqueeze(1), last_occluded.unsqueeze(0)
    suppress = (pairs & (li > lj) & (lj > -1)).any(1) | (pairs & (lj > li) & (li > -1)).any(0)
    last_occluded[~binary.any(dim=(-1, -2)) | suppress] = frame
    low_res = low_res.clone()
    low_res[suppress] = -10.0
    return low_res
