"""HyperTile (tfernd, "HyperTile: Tiled optimizations for Stable-Diffusion", 2023) as ComfyUI's
comfy_extras/nodes_hypertile.py applies it: at the levels whose token count is the latent's
divided by 4^i (i <= max_depth), the self-attention queries are cut into `nh x nw` spatial tiles
(each side divided by a random one of its `swap_size` largest divisors giving tiles of at least
`tile_size / 8` latent pixels) that run as separate batch rows, and the output is stitched back.

ComfyUI tiles only the queries; its attention kernels then view the untouched keys and values
with the query batch, so each query tile attends to one contiguous band of `N / (nh*nw)` tokens
in raster order. That reshape is made explicit here, so results match ComfyUI's.
The divisor choice draws from torch's global CPU generator, as ComfyUI does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch


def random_divisor(value: int, min_value: int, max_options: int = 1) -> int:
    """`value // d` for a random one of the `max_options` smallest divisors `d >= min_value` of
    `value` (`min_value` capped at `value`)."""
    min_value = min(min_value, value)
    divisors = [i for i in range(min_value, value + 1) if value % i == 0]
    counts = [value // i for i in divisors[:max_options]]
    index = torch.randint(low=0, high=len(counts) - 1, size=(1,)).item() if len(counts) > 1 else 0
    return counts[index]


def to_tiles(x: torch.Tensor, nh: int, nw: int, h: int, w: int) -> torch.Tensor:
    """`[B, (nh th nw tw), C] -> [(B nh nw), (th tw), C]` for an `h x w` token map."""
    b, _, c = x.shape
    th, tw = h // nh, w // nw
    return x.reshape(b, nh, th, nw, tw, c).permute(0, 1, 3, 2, 4, 5).reshape(b * nh * nw, th * tw, c)


def from_tiles(x: torch.Tensor, nh: int, nw: int, h: int, w: int) -> torch.Tensor:
    """The inverse of `to_tiles`."""
    c = x.shape[-1]
    th, tw = h // nh, w // nw
    b = x.shape[0] // (nh * nw)
    return x.reshape(b, nh, nw, th, tw, c).permute(0, 1, 3, 2, 4, 5).reshape(b, nh * th * nw * tw, c)


@dataclass
class _Tiling:
    """The tiling of the current block, handed from the attn1 patch to the output patch."""

    current: Any = None

    def __deepcopy__(self, memo: dict) -> "_Tiling":
        return self


@dataclass(frozen=True)
class HyperTileIn:
    """`attn1_patch`: tile the queries (and band the keys/values, see the module docstring)."""

    tile_size: int
    swap_size: int
    max_depth: int
    scale_depth: bool
    tiling: _Tiling = field(compare=False)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, extra_options: dict) -> tuple:
        tokens = q.shape[-2]
        shape = extra_options["original_shape"]
        levels = [(shape[-2] / (2 ** i)) * (shape[-1] / (2 ** i)) for i in range(self.max_depth + 1)]
        if tokens not in levels:
            return q, k, v
        aspect = shape[-1] / shape[-2]
        h, w = round(math.sqrt(tokens * aspect)), round(math.sqrt(tokens / aspect))
        factor = 2 ** levels.index(tokens) if self.scale_depth else 1
        latent_tile = max(32, self.tile_size) // 8
        nh = random_divisor(h, latent_tile * factor, self.swap_size)
        nw = random_divisor(w, latent_tile * factor, self.swap_size)
        if nh * nw <= 1:
            return q, k, v
        self.tiling.current = (nh, nw, h, w)
        rows = q.shape[0] * nh * nw
        return (to_tiles(q, nh, nw, h, w), k.reshape(rows, -1, k.shape[-1]), v.reshape(rows, -1, v.shape[-1]))

    def cache_signature(self) -> tuple:
        return ("HyperTileIn", self.tile_size, self.swap_size, self.max_depth, self.scale_depth)


@dataclass(frozen=True)
class HyperTileOut:
    """`attn1_output_patch`: stitch the tiles back."""

    tiling: _Tiling = field(compare=False)

    def __call__(self, out: torch.Tensor, extra_options: dict) -> torch.Tensor:
        if self.tiling.current is None:
            return out
        nh, nw, h, w = self.tiling.current
        self.tiling.current = None
        return from_tiles(out, nh, nw, h, w)

    def cache_signature(self) -> tuple:
        return ("HyperTileOut",)


def hypertile(tile_size: int, swap_size: int, max_depth: int, scale_depth: bool) -> tuple[HyperTileIn, HyperTileOut]:
    """HyperTile's attn1 patch and attn1 output patch, sharing their hand-over."""
    tiling = _Tiling()
    return HyperTileIn(tile_size, swap_size, max_depth, scale_depth, tiling), HyperTileOut(tiling)
