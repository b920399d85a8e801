"""Token merging for Stable Diffusion (Bolya & Hoffman 2023, "Token Merging for Fast Stable
Diffusion", CVPR workshops, arXiv 2303.17604), as ComfyUI's comfy_extras/nodes_tomesd.py applies
it: at the full-resolution level only, the self-attention queries are merged (bipartite soft
matching on the queries themselves, one random destination token per 2x2 cell) before attention
and the attention output is unmerged after it; keys and values keep every token.

The destination choice draws from torch's global generator of the tensor's device, as ComfyUI
does (so a seeded run reproduces ComfyUI's choice).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

Merge = Callable[[torch.Tensor], torch.Tensor]


def _identity(x: torch.Tensor, mode: str | None = None) -> torch.Tensor:
    return x


def bipartite_soft_matching_2d(metric: torch.Tensor, w: int, h: int, sx: int, sy: int, r: int,
                               no_rand: bool = False) -> tuple[Callable[..., torch.Tensor], Merge]:
    """`(merge, unmerge)` that merge `r` of the `metric [B, N, C]` tokens of a `h x w` map.

    Tokens are split into destinations (one per `sy x sx` cell, random or top-left) and sources;
    each source is linked to its most cosine-similar destination and the `r` best-linked sources
    are averaged into their destinations. `unmerge` copies each merged destination back to its
    sources.
    """
    b, n, _ = metric.shape
    if r <= 0 or w == 1 or h == 1:
        return _identity, _identity
    device = metric.device
    with torch.no_grad():
        cells_y, cells_x = h // sy, w // sx
        if no_rand:
            pick = torch.zeros(cells_y, cells_x, 1, device=device, dtype=torch.int64)
        else:
            pick = torch.randint(sy * sx, size=(cells_y, cells_x, 1), device=device)
        # -1 marks each cell's destination, 0 the sources; laid out back on the token grid.
        marks = torch.zeros(cells_y, cells_x, sy * sx, device=device, dtype=torch.int64)
        marks.scatter_(dim=2, index=pick, src=-torch.ones_like(pick, dtype=pick.dtype))
        marks = marks.view(cells_y, cells_x, sy, sx).transpose(1, 2).reshape(cells_y * sy, cells_x * sx)
        if cells_y * sy < h or cells_x * sx < w:  # the uncovered border stays source tokens
            grid = torch.zeros(h, w, device=device, dtype=torch.int64)
            grid[:cells_y * sy, :cells_x * sx] = marks
            marks = grid
        order = marks.reshape(1, -1, 1).argsort(dim=1)  # destinations first, then sources
        num_dst = cells_y * cells_x
        src_pos = order[:, num_dst:, :]  # [1, N - num_dst, 1]
        dst_pos = order[:, :num_dst, :]  # [1, num_dst, 1]

        def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            c = x.shape[-1]
            return (torch.gather(x, 1, src_pos.expand(b, n - num_dst, c)),
                    torch.gather(x, 1, dst_pos.expand(b, num_dst, c)))

        unit = metric / metric.norm(dim=-1, keepdim=True)
        a, d = split(unit)
        scores = a @ d.transpose(-1, -2)  # [B, src, dst] cosine similarities
        r = min(a.shape[1], r)
        best, best_dst = scores.max(dim=-1)
        ranked = best.argsort(dim=-1, descending=True)[..., None]
        kept_idx = ranked[..., r:, :]  # sources left alone
        merged_idx = ranked[..., :r, :]  # sources merged away
        target_idx = torch.gather(best_dst[..., None], dim=-2, index=merged_idx)

    def merge(x: torch.Tensor, mode: str = "mean") -> torch.Tensor:
        src, dst = split(x)
        rows, t1, c = src.shape
        kept = torch.gather(src, -2, kept_idx.expand(rows, t1 - r, c))
        moved = torch.gather(src, -2, merged_idx.expand(rows, r, c))
        dst = dst.scatter_reduce(-2, target_idx.expand(rows, r, c), moved, reduce=mode)
        return torch.cat([kept, dst], dim=1)

    def unmerge(x: torch.Tensor) -> torch.Tensor:
        n_kept = kept_idx.shape[1]
        kept, dst = x[..., :n_kept, :], x[..., n_kept:, :]
        c = kept.shape[-1]
        moved = torch.gather(dst, -2, target_idx.expand(b, r, c))
        out = torch.zeros(b, n, c, device=x.device, dtype=x.dtype)
        src_all = src_pos.expand(b, src_pos.shape[1], 1)
        out.scatter_(-2, dst_pos.expand(b, num_dst, c), dst)
        out.scatter_(-2, torch.gather(src_all, 1, kept_idx).expand(b, n_kept, c), kept)
        out.scatter_(-2, torch.gather(src_all, 1, merged_idx).expand(b, r, c), moved)
        return out

    return merge, unmerge


def merge_functions(x: torch.Tensor, ratio: float, original_shape: list[int]) -> tuple[Callable[..., torch.Tensor], Merge]:
    """ToMe's `(merge, unmerge)` for tokens `x [B, N, C]` of a UNet whose input is
    `original_shape` [B, C, H, W]: merging `int(N * ratio)` tokens at the full-resolution level,
    identity at the lower ones."""
    _, _, height, width = original_shape
    downsample = int(math.ceil(math.sqrt((height * width) // x.shape[1])))
    if downsample > 1:
        return _identity, _identity
    w = int(math.ceil(width / downsample))
    h = int(math.ceil(height / downsample))
    return bipartite_soft_matching_2d(x, w, h, 2, 2, int(x.shape[1] * ratio))


@dataclass
class _Pending:
    """The unmerge of the last merge, handed from the attn1 patch to the attn1 output patch."""

    unmerge: Any = None

    def __deepcopy__(self, memo: dict) -> "_Pending":
        return self


@dataclass(frozen=True)
class TomeMerge:
    """`attn1_patch`: merge the queries."""

    ratio: float
    pending: _Pending = field(compare=False)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, extra_options: dict) -> tuple:
        merge, self.pending.unmerge = merge_functions(q, self.ratio, extra_options["original_shape"])
        return merge(q), k, v

    def cache_signature(self) -> tuple:
        return ("TomeMerge", self.ratio)


@dataclass(frozen=True)
class TomeUnmerge:
    """`attn1_output_patch`: undo the merge of the same block."""

    pending: _Pending = field(compare=False)

    def __call__(self, out: torch.Tensor, extra_options: dict) -> torch.Tensor:
        return self.pending.unmerge(out)

    def cache_signature(self) -> tuple:
        return ("TomeUnmerge",)


def token_merging(ratio: float) -> tuple[TomeMerge, TomeUnmerge]:
    """The attn1 patch and attn1 output patch of ToMe at `ratio`, sharing their hand-over."""
    pending = _Pending()
    return TomeMerge(ratio, pending), TomeUnmerge(pending)
