"""The Swin Transformer backbone BiRefNet uses (Liu et al. 2021, "Swin Transformer: Hierarchical
Vision Transformer using Shifted Windows"), in the dense-prediction form of the Swin authors'
detection / segmentation code that BiRefNet and ComfyUI's `comfy/background_removal/birefnet.py`
(`bb.*`) build; written here from the paper and that file's behaviour.

- `patch_embed`: a `patch x patch` stride-`patch` conv (the image zero-padded right / bottom to a
  multiple of the patch first), then a LayerNorm over the channels (`patch_embed.norm`).
- `layers.i`: `depth` blocks at width `embed * 2**i`; block `j` is shifted (by `window // 2`)
  when `j` is odd. A block: LayerNorm, the token grid zero-padded right / bottom to a multiple of
  the window, rolled by `-shift` (shifted blocks), cut into `window x window` windows, multi-head
  self-attention inside each window with the learned relative position bias
  (`relative_position_bias_table[index]`, index `(dy + w - 1) * (2w - 1) + dx + w - 1`) and, in
  shifted blocks, -100 added between tokens of different regions of the rolled grid (the regions
  are the three row bands `[0, Hp - w)`, `[Hp - w, Hp - s)`, `[Hp - s, Hp)` times the three column
  bands), rolled back, cropped, added to the input; then LayerNorm, MLP (GELU, `mlp_ratio` wide),
  added. There is no small-stage exception: a stage smaller than the window is padded up to it.
- `layers.i.downsample` (all but the last): patch merging, the grid padded to even sizes, the
  2x2 neighbours concatenated in the order (0, 0), (1, 0), (0, 1), (1, 1) (row, column), LayerNorm,
  a bias-free linear to twice the width; the grid halves rounding up.
- `norm{i}`: a LayerNorm on stage i's output before merging; stage outputs `[B, C_i, H_i, W_i]`.

Widths, depths, heads (the bias table's columns), the window (its rows, `(2w - 1)**2`), the patch
and the MLP ratio are read from the weights (`SwinConfig.detect_from_weights`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class SwinConfig:
    embed_dim: int = 192
    depths: tuple[int, ...] = (2, 2, 18, 2)
    num_heads: tuple[int, ...] = (6, 12, 24, 48)
    window_size: int = 12
    patch_size: int = 4
    in_channels: int = 3
    mlp_ratio: float = 4.0
    patch_norm: bool = True

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(self.embed_dim * 2 ** i for i in range(len(self.depths)))

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, torch.Tensor], prefix: str = "") -> "SwinConfig":
        proj = tensors[f"{prefix}patch_embed.proj.weight"]  # [embed, in, p, p]
        depths, heads = [], []
        stage = 0
        while f"{prefix}layers.{stage}.blocks.0.norm1.weight" in tensors:
            depth = 0
            while f"{prefix}layers.{stage}.blocks.{depth}.norm1.weight" in tensors:
                depth += 1
            depths.append(depth)
            heads.append(int(tensors[f"{prefix}layers.{stage}.blocks.0.attn.relative_position_bias_table"].shape[1]))
            stage += 1
        if not depths:
            raise KeyError(f"{prefix}layers.0.blocks.0.norm1.weight")
        rows = int(tensors[f"{prefix}layers.0.blocks.0.attn.relative_position_bias_table"].shape[0])
        side = math.isqrt(rows)
        if side * side != rows or side % 2 == 0:
            raise ValueError(f"relative position bias table of {rows} rows is not (2 * window - 1)**2")
        embed = int(proj.shape[0])
        hidden = int(tensors[f"{prefix}layers.0.blocks.0.mlp.fc1.weight"].shape[0])
        return cls(embed_dim=embed, depths=tuple(depths), num_heads=tuple(heads), window_size=(side + 1) // 2,
                   patch_size=int(proj.shape[-1]), in_channels=int(proj.shape[1]), mlp_ratio=hidden / embed,
                   patch_norm=f"{prefix}patch_embed.norm.weight" in tensors)


def relative_position_index(window: int) -> torch.Tensor:
    """[w*w, w*w] long: the bias-table row for each (query, key) pair of a window."""
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
    rel = coords[:, :, None] - coords[:, None, :] + (window - 1)  # [2, N, N], each in 0 .. 2w - 2
    return rel[0] * (2 * window - 1) + rel[1]


def windows_of(x: torch.Tensor, window: int) -> torch.Tensor:
    """[B, H, W, C] -> [B * H/w * W/w, w*w, C], windows in row-major order per image."""
    b, h, w, c = x.shape
    x = x.view(b, h // window, window, w // window, window, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, window * window, c)


def merge_windows(x: torch.Tensor, window: int, height: int, width: int) -> torch.Tensor:
    """Inverse of `windows_of`: [B * nW, w*w, C] -> [B, H, W, C]."""
    c = x.shape[-1]
    x = x.view(-1, height // window, width // window, window, window, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, height, width, c)


def shift_mask(height: int, width: int, window: int, shift: int, device=None, dtype=None) -> torch.Tensor:
    """[nW, w*w, w*w]: 0 between tokens of one region of the rolled (padded) grid, -100 across."""
    region = torch.zeros(height, width, device=device)
    bands = ((0, -window), (-window, -shift), (-shift, None))
    label = 0
    for r0, r1 in bands:
        for c0, c1 in bands:
            region[slice(r0, r1), slice(c0, c1)] = label
            label += 1
    labels = windows_of(region[None, :, :, None], window)[..., 0]  # [nW, N]
    different = labels[:, None, :] != labels[:, :, None]
    return torch.zeros(different.shape, device=device, dtype=dtype).masked_fill(different, -100.0)


class WindowAttention(nn.Module):
    def __init__(self, dim: int, window: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.window = window
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        self.register_buffer("relative_position_index", relative_position_index(window), persistent=False)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        # x [B*nW, N, C]; mask [nW, N, N] or None
        bw, n, c = x.shape
        q, k, v = self.qkv(x).view(bw, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        bias = bias.permute(2, 0, 1).to(q.dtype)[None]  # [1, heads, N, N]
        if mask is not None:
            nw = mask.shape[0]
            bias = (bias + mask.to(q.dtype)[:, None]).repeat(bw // nw, 1, 1, 1)  # [B*nW, heads, N, N]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.expand(bw, -1, -1, -1))
        return self.proj(out.transpose(1, 2).reshape(bw, n, c))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class SwinBlock(nn.Module):
    def __init__(self, dim: int, heads: int, window: int, shift: int, mlp_ratio: float) -> None:
        super().__init__()
        self.window, self.shift = window, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor, height: int, width: int, mask: torch.Tensor) -> torch.Tensor:
        # x [B, H*W, C]
        b, _, c = x.shape
        w = self.window
        y = self.norm1(x).view(b, height, width, c)
        y = F.pad(y, (0, 0, 0, (w - width % w) % w, 0, (w - height % w) % w))
        hp, wp = y.shape[1], y.shape[2]
        if self.shift:
            y = torch.roll(y, (-self.shift, -self.shift), dims=(1, 2))
        y = self.attn(windows_of(y, w), mask if self.shift else None)
        y = merge_windows(y, w, hp, wp)
        if self.shift:
            y = torch.roll(y, (self.shift, self.shift), dims=(1, 2))
        x = x + y[:, :height, :width].reshape(b, height * width, c)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: torch.Tensor, height: int, width: int) -> torch.Tensor:
        b, _, c = x.shape
        x = F.pad(x.view(b, height, width, c), (0, 0, 0, width % 2, 0, height % 2))
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], dim=-1)
        return self.reduction(self.norm(x.reshape(b, -1, 4 * c)))


class SwinStage(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int, window: int, mlp_ratio: float, merge: bool) -> None:
        super().__init__()
        self.window = window
        self.blocks = nn.ModuleList(SwinBlock(dim, heads, window, 0 if i % 2 == 0 else window // 2, mlp_ratio)
                                    for i in range(depth))
        self.downsample = PatchMerging(dim) if merge else None

    def forward(self, x: torch.Tensor, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor, int, int]:
        """(stage output [B, H*W, C], input of the next stage, its height, its width)."""
        w = self.window
        mask = shift_mask(-(-height // w) * w, -(-width // w) * w, w, w // 2, device=x.device, dtype=x.dtype)
        for block in self.blocks:
            x = block(x, height, width, mask)
        if self.downsample is None:
            return x, x, height, width
        return x, self.downsample(x, height, width), (height + 1) // 2, (width + 1) // 2


class PatchEmbed(nn.Module):
    def __init__(self, patch: int, in_channels: int, dim: int, norm: bool) -> None:
        super().__init__()
        self.patch = patch
        self.proj = nn.Conv2d(in_channels, dim, patch, stride=patch)
        self.norm = nn.LayerNorm(dim) if norm else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.patch
        x = F.pad(x, (0, (p - x.shape[3] % p) % p, 0, (p - x.shape[2] % p) % p))
        x = self.proj(x)  # [B, C, h, w]
        if self.norm is not None:
            x = self.norm(x.movedim(1, -1)).movedim(-1, 1)
        return x


class SwinTransformer(nn.Module):
    """`forward(x [B, 3, H, W])` -> the normed stage outputs, `[B, C_i, H_i, W_i]` each."""

    def __init__(self, config: SwinConfig) -> None:
        super().__init__()
        self.config = config
        widths = config.widths
        self.patch_embed = PatchEmbed(config.patch_size, config.in_channels, config.embed_dim, config.patch_norm)
        self.layers = nn.ModuleList(
            SwinStage(widths[i], config.depths[i], config.num_heads[i], config.window_size, config.mlp_ratio,
                      merge=i < len(widths) - 1) for i in range(len(widths)))
        for i, width in enumerate(widths):
            self.add_module(f"norm{i}", nn.LayerNorm(width))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.patch_embed(x)
        b, _, height, width = x.shape
        x = x.flatten(2).transpose(1, 2)
        outs = []
        for i, stage in enumerate(self.layers):
            out, x, next_h, next_w = stage(x, height, width)
            out = getattr(self, f"norm{i}")(out)
            outs.append(out.view(b, height, width, -1).permute(0, 3, 1, 2).contiguous())
            height, width = next_h, next_w
        return tuple(outs)
