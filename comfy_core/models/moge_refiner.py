"""MoGe-3's refiner: a sparse 3-D UNet over the voxelised point map that predicts a residual of each
pixel's log-depth, conditioned on the encoder's feature map; in the key layout ComfyUI's
`comfy/ldm/moge/modules.py: Sparse3DUNet` loads (`refiner.*`), and its sparse operations
(`comfy/ldm/.../sparse` ops: FlexGEMM's conventions) written here in plain torch.

Sparse volume: `feats` [N, C], `coords` [N, 4] int (batch, x, y, z), `shape` (X, Y, Z).

- submanifold 3x3x3 convolution: outputs only at the input voxels; the neighbour for kernel index
  (i, j, k) (x-major) is the voxel at `coord + (i - 1, j - 1, k - 1)` when present, else zero; the
  weight is stored `[C_out, 3, 3, 3, C_in]`;
- mean pooling by `f`: voxels grouped by `coord // f` (per batch), features averaged; the coarse
  volume's shape is `ceil(shape / f)`; the fine -> coarse index inverts it (nearest upsampling);
- UNet (channels 32, 64, 128, 256, 512 read from the weights): `input_proj`; per level a residual
  block `x + conv2(silu(conv1(silu(LayerNorm(x)))))`, then mean pooling and a linear to the next
  width; at the bottom the encoder's feature at each voxel's (row, col) through `encoder_fuse`,
  concatenated and fused (`Linear, SiLU, Linear`), a residual block; up: nearest upsampling through
  a linear, plus the level's skip, a residual block; `out_proj` to one channel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

KERNEL = 3


def _keys(coords: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
    x, y, z = shape
    c = coords.long()
    return ((c[:, 0] * x + c[:, 1]) * y + c[:, 2]) * z + c[:, 3]


def neighbour_map(coords: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
    """[N, 27]: the index of each voxel's neighbour at each kernel offset (x-major), N where none
    (the zero row `SubmanifoldConv3d` appends)."""
    keys = _keys(coords, shape)
    sorted_keys, order = torch.sort(keys)
    offsets = torch.stack(torch.meshgrid(*[torch.arange(KERNEL, device=coords.device) - KERNEL // 2] * 3,
                                         indexing="ij"), dim=-1).reshape(-1, 3)  # [27, 3]
    c = coords.long()
    target = c[:, None, 1:] + offsets[None]  # [N, 27, 3]
    inside = ((target >= 0) & (target < torch.tensor(shape, device=coords.device))).all(dim=-1)
    x, y, z = shape
    key = ((c[:, None, 0] * x + target[..., 0]) * y + target[..., 1]) * z + target[..., 2]
    at = torch.searchsorted(sorted_keys, key.reshape(-1)).clamp_(max=len(sorted_keys) - 1).view_as(key)
    hit = inside & (sorted_keys[at] == key)
    return torch.where(hit, order[at], torch.full_like(at, coords.shape[0]))


class SubmanifoldConv3d(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(c_out, KERNEL, KERNEL, KERNEL, c_in))
        self.bias = nn.Parameter(torch.zeros(c_out))

    def forward(self, feats: torch.Tensor, neighbours: torch.Tensor) -> torch.Tensor:
        padded = torch.cat([feats, feats.new_zeros(1, feats.shape[1])])  # row N: an absent neighbour
        gathered = padded[neighbours].reshape(feats.shape[0], -1)  # [N, 27 * C]
        return torch.addmm(self.bias, gathered, self.weight.reshape(self.weight.shape[0], -1).T)


class SparseResBlock3d(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(channels, eps=1e-6)
        self.conv1 = SubmanifoldConv3d(channels, channels)
        self.conv2 = SubmanifoldConv3d(channels, channels)

    def forward(self, feats: torch.Tensor, neighbours: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(feats)), neighbours)
        return self.conv2(F.silu(h), neighbours) + feats


def pool_mean(feats: torch.Tensor, coords: torch.Tensor, shape: tuple[int, int, int],
              factor: int) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int, int], torch.Tensor]:
    """(pooled feats, coarse coords, coarse shape, fine -> coarse index)."""
    coarse_shape = tuple((s + factor - 1) // factor for s in shape)
    coarse = torch.cat([coords[:, :1].long(), coords[:, 1:].long().div(factor, rounding_mode="floor")], dim=1)
    unique, index = torch.unique(_keys(coarse, coarse_shape), return_inverse=True)
    pooled = torch.zeros(unique.shape[0], feats.shape[1], dtype=feats.dtype, device=feats.device)
    pooled.index_add_(0, index, feats)
    counts = torch.zeros(unique.shape[0], dtype=feats.dtype, device=feats.device)
    counts.index_add_(0, index, torch.ones_like(index, dtype=feats.dtype))
    x, y, z = coarse_shape
    out = torch.stack([unique // (x * y * z), unique // (y * z) % x, unique // z % y, unique % z], dim=1)
    return pooled / counts[:, None], out.to(torch.int32), coarse_shape, index


class _PoolDown(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.linear = nn.Linear(c_in, c_out)


class _NearestUp(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.linear = nn.Linear(c_in, c_out)


@dataclass(frozen=True)
class RefinerConfig:
    encoder_channels: int
    channels: tuple[int, ...] = (32, 64, 128, 256, 512)
    blocks_per_level: int = 1
    factor: int = 2

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "refiner.") -> "RefinerConfig":
        stem = prefix + "down_stages."
        levels = 1 + max(int(k[len(stem):].split(".", 1)[0]) for k in tensors if k.startswith(stem))
        blocks = 1 + max(int(k[len(stem):].split(".")[1]) for k in tensors if k.startswith(stem + "0."))
        return cls(encoder_channels=int(tensors[prefix + "encoder_fuse.weight"].shape[1]),
                   channels=tuple(int(tensors[f"{stem}{i}.0.norm1.weight"].shape[0]) for i in range(levels)),
                   blocks_per_level=blocks)


class Sparse3DUNet(nn.Module):
    def __init__(self, config: RefinerConfig) -> None:
        super().__init__()
        self.config = config
        ch = config.channels
        pairs = list(zip(ch[:-1], ch[1:]))

        def stage(c: int) -> nn.ModuleList:
            return nn.ModuleList([SparseResBlock3d(c) for _ in range(config.blocks_per_level)])

        self.input_proj = nn.Linear(3, ch[0])
        self.encoder_fuse = nn.Linear(config.encoder_channels, ch[-1])
        self.fuse_proj = nn.Sequential(nn.Linear(2 * ch[-1], ch[-1]), nn.SiLU(), nn.Linear(ch[-1], ch[-1]))
        self.down_stages = nn.ModuleList([stage(c) for c in ch])
        self.downsample_blocks = nn.ModuleList([_PoolDown(lo, hi) for lo, hi in pairs])
        self.bottleneck_stage = stage(ch[-1])
        self.upsample_blocks = nn.ModuleList([_NearestUp(hi, lo) for lo, hi in reversed(pairs)])
        self.up_stages = nn.ModuleList([stage(lo) for lo, _ in reversed(pairs)])
        self.out_proj = nn.Linear(ch[0], 1)

    def forward(self, feats: torch.Tensor, coords: torch.Tensor, shape: tuple[int, int, int],
                conditioning: torch.Tensor) -> torch.Tensor:
        """[N, 1] residuals for the voxels `coords` [N, 4] with inputs `feats` [N, 3];
        `conditioning` [B, C, rows, cols] is read at the coarsest level's (x, y)."""
        levels = len(self.down_stages)
        neighbours: list[torch.Tensor] = []
        skips, indices = [], []
        x = self.input_proj(feats)
        for i, blocks in enumerate(self.down_stages):
            neighbours.append(neighbour_map(coords, shape))  # the same voxels on the way up
            for block in blocks:
                x = block(x, neighbours[i])
            if i < levels - 1:
                skips.append(x)
                x, coords, shape, index = pool_mean(x, coords, shape, self.config.factor)
                x = self.downsample_blocks[i].linear(x)
                indices.append(index)
        c = coords.long()
        condition = conditioning[c[:, 0], :, c[:, 1], c[:, 2]]  # [N', C]
        x = self.fuse_proj(torch.cat([x, self.encoder_fuse(condition)], dim=-1))
        for block in self.bottleneck_stage:
            x = block(x, neighbours[-1])
        for i, (up, blocks) in enumerate(zip(self.upsample_blocks, self.up_stages)):
            level = levels - 2 - i
            x = up.linear(x)[indices[level]] + skips[level]
            for block in blocks:
                x = block(x, neighbours[level])
        return self.out_proj(x)
