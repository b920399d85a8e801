"""SAM 3 / 3.1's video memory (Ravi et al. 2024, "SAM 2: Segment Anything in Images and Videos";
Carion et al. 2025, "SAM 3"): the memory encoder that fuses a frame's features with its predicted
masks, and the memory attention that conditions the current frame on the memory bank.

- `MemoryEncoder` (ComfyUI's `MemoryBackbone`): masks downsampled by strided 3x3 convolutions
  (LayerNorm2d + GELU), added to the 1x1-projected pixel features, two ConvNeXt blocks (`Fuser`),
  an optional 1x1 projection to the memory width (SAM 3: 256 -> 64), and DETR sine positions.
  SAM 3.1 feeds 2M mask channels (M multiplexed objects' masks, then their "conditioning" planes).
- `MemoryAttention` (SAM 3's, SAM 2's layer): self-attention and cross-attention to the memory,
  both with 2-D axial RoPE over the feature grid (keys repeat the grid per memory frame; the
  trailing object-pointer tokens are not rotated), ReLU FFN.
- `DecoupledMemoryAttention` (SAM 3.1's): the cross-attention's query is the sum of a projection of
  the frame's raw image features and one of the running state, its key the sum of a projection of
  the memory frames' image features and one of their memory features (plus their positions); GELU FFN.

Behaviour and parameter names as ComfyUI's `comfy/ldm/sam3/tracker.py` (`MaskDownSampler`,
`CXBlock`, `Fuser`, `MemoryBackbone`, `SplitAttn`, `MemoryAttnLayer`, `MemoryAttnEncoder`,
`DecoupledMemoryAttnLayer`, `DecoupledMemoryEncoder`), read there and written here; LayerNorms
keep torch's eps (1e-5) as ComfyUI's do.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.sam3.backbone import PositionEmbeddingSine, apply_rope, attention, axial_rope
from comfy_core.models.sam3.sam_heads import LayerNorm2d

MASK_SIZE = 1152  # masks are resized to this before the downsampler (16 x the 72-cell grid)


class MaskDownSampler(nn.Module):
    """`[B, in, S, S]` -> `[B, out, S / 2^n, S / 2^n]`: n stride-2 3x3 convolutions with LayerNorm2d
    and GELU (`encoder.{3i, 3i+1}`), then a 1x1 convolution (`encoder.{3n}`)."""

    def __init__(self, out_dim: int, in_chans: int, channels: tuple[int, ...],
                 interpol_size: int | None = MASK_SIZE) -> None:
        super().__init__()
        self.interpol_size = interpol_size
        layers: list[nn.Module] = []
        prev = in_chans
        for ch in channels:
            layers += [nn.Conv2d(prev, ch, 3, stride=2, padding=1), LayerNorm2d(ch), nn.GELU()]
            prev = ch
        layers.append(nn.Conv2d(prev, out_dim, 1))
        self.encoder = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = self.interpol_size
        if size is not None and tuple(x.shape[-2:]) != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
        return self.encoder(x)


class CXBlock(nn.Module):
    """ConvNeXt block: depthwise 7x7, LayerNorm, 4x pointwise MLP (GELU), layer scale `gamma`, residual."""

    def __init__(self, dim: int, kernel: int = 7) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, H, W]
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y)))) * self.gamma.to(y.dtype)
        return x + y.permute(0, 3, 1, 2)


class Fuser(nn.Module):
    def __init__(self, dim: int, layers: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(*(CXBlock(dim) for _ in range(layers)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class MemoryEncoder(nn.Module):
    """A frame's pixel features `[1 | B, C, h, w]` and mask planes `[B, in, S, S]` (already mapped to
    the encoder's input range: no sigmoid here) -> (memory features `[B, out, h, w]`, positions)."""

    def __init__(self, dim: int, out_dim: int, in_chans: int, channels: tuple[int, ...], fuser_layers: int) -> None:
        super().__init__()
        self.mask_downsampler = MaskDownSampler(dim, in_chans, channels)
        self.pix_feat_proj = nn.Conv2d(dim, dim, 1)
        self.fuser = Fuser(dim, fuser_layers)
        self.has_out_proj = out_dim != dim
        if self.has_out_proj:
            self.out_proj = nn.Conv2d(dim, out_dim, 1)
        self.position_encoding = PositionEmbeddingSine(out_dim)

    def forward(self, pix_feat: torch.Tensor, masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask_features = self.mask_downsampler(masks.to(pix_feat.dtype))
        if mask_features.shape[-2:] != pix_feat.shape[-2:]:
            mask_features = F.interpolate(mask_features, size=pix_feat.shape[-2:], mode="bilinear", align_corners=False)
        features = self.fuser(self.pix_feat_proj(pix_feat) + mask_features)
        if self.has_out_proj:
            features = self.out_proj(features)
        return features, self.position_encoding(features)


def rope_qk(q: torch.Tensor, k: torch.Tensor, angles: torch.Tensor, heads: int,
            exclude: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Axial RoPE on projected queries `[B, Nq, C]` (Nq = the grid's cells, `angles [Nq, d / 2]`)
    and keys `[B, Nk, C]`: the first Nk - `exclude` keys are memory frames of the same grid, so
    the angles repeat every Nq keys; the last `exclude` (object pointers) are left as they are."""
    b, nq, c = q.shape
    d = c // heads

    def rotate(x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        return apply_rope(x.reshape(b, n, heads, d).transpose(1, 2), a).transpose(1, 2).reshape(b, n, c)

    q = rotate(q, angles)
    n_rope = k.shape[1] - exclude
    if n_rope > 0:
        reps = -(-n_rope // angles.shape[0])
        rotated = rotate(k[:, :n_rope], angles.repeat(reps, 1)[:n_rope])
        k = torch.cat([rotated, k[:, n_rope:]], dim=1)
    return q, k


class SplitAttn(nn.Module):
    """Attention with separate q / k / v / out projections; keys and values may be narrower (`kv_dim`)."""

    def __init__(self, dim: int, heads: int, kv_dim: int | None = None) -> None:
        super().__init__()
        self.heads = heads
        kv_dim = kv_dim or dim
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(dim, dim), nn.Linear(kv_dim, dim), nn.Linear(kv_dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angles: torch.Tensor | None,
                exclude: int = 0) -> torch.Tensor:
        q, k, v = self.q_proj(q), self.k_proj(k), self.v_proj(v)
        if angles is not None:
            q, k = rope_qk(q, k, angles, self.heads, exclude)
        return self.out_proj(attention(q, k, v, self.heads))


class MemoryAttnLayer(nn.Module):
    """SAM 3's (SAM 2's) memory attention layer: pre-norm RoPE self-attention, RoPE cross-attention
    to the memory (keys = memory + positions, values = memory), ReLU FFN."""

    def __init__(self, dim: int, heads: int, kv_dim: int, ffn: int) -> None:
        super().__init__()
        self.self_attn = SplitAttn(dim, heads)
        self.cross_attn_image = SplitAttn(dim, heads, kv_dim)
        self.linear1, self.linear2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_pos: torch.Tensor | None,
                angles: torch.Tensor | None, exclude: int = 0) -> torch.Tensor:
        y = self.norm1(x)
        x = x + self.self_attn(y, y, y, angles)
        keys = memory + memory_pos if memory_pos is not None else memory
        x = x + self.cross_attn_image(self.norm2(x), keys, memory, angles, exclude)
        return x + self.linear2(F.relu(self.linear1(self.norm3(x))))


class MemoryAttnEncoder(nn.Module):
    """`[B, HW, C]` frame tokens (+ 0.1 x their positions) through the layers, then a LayerNorm."""

    def __init__(self, dim: int, heads: int, kv_dim: int, ffn: int, layers: int, grid: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(MemoryAttnLayer(dim, heads, kv_dim, ffn) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.register_buffer("rope", axial_rope(grid, grid, dim // heads), persistent=False)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, src_pos: torch.Tensor | None,
                memory_pos: torch.Tensor | None, exclude: int = 0) -> torch.Tensor:
        if src_pos is not None:
            x = x + 0.1 * src_pos
        for layer in self.layers:
            x = layer(x, memory, memory_pos, self.rope, exclude)
        return self.norm(x)


class DecoupledMemoryAttnLayer(nn.Module):
    """SAM 3.1's layer (module docstring); flat projection names as the checkpoint's."""

    def __init__(self, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        for name in ("self_attn", "cross_attn"):
            for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                setattr(self, f"{name}_{proj}", nn.Linear(dim, dim))
        self.image_cross_attn_q_proj = nn.Linear(dim, dim)
        self.image_cross_attn_k_proj = nn.Linear(dim, dim)
        self.linear1, self.linear2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, image: torch.Tensor, x: torch.Tensor, memory_image: torch.Tensor, memory: torch.Tensor,
                memory_image_pos: torch.Tensor | None, angles: torch.Tensor, exclude: int = 0) -> torch.Tensor:
        y = self.norm1(x)
        q, k = rope_qk(self.self_attn_q_proj(y), self.self_attn_k_proj(y), angles, self.heads)
        x = x + self.self_attn_out_proj(attention(q, k, self.self_attn_v_proj(y), self.heads))
        y = self.norm2(x)
        q = self.image_cross_attn_q_proj(image) + self.cross_attn_q_proj(y)
        k = self.image_cross_attn_k_proj(memory_image) + self.cross_attn_k_proj(memory)
        if memory_image_pos is not None:
            k = k + memory_image_pos
        q, k = rope_qk(q, k, angles, self.heads, exclude)
        x = x + self.cross_attn_out_proj(attention(q, k, self.cross_attn_v_proj(memory), self.heads))
        return x + self.linear2(F.gelu(self.linear1(self.norm3(x))))


class DecoupledMemoryEncoder(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int, layers: int, grid: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoupledMemoryAttnLayer(dim, heads, ffn) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.register_buffer("rope", axial_rope(grid, grid, dim // heads), persistent=False)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_pos: torch.Tensor, src_pos: torch.Tensor,
                memory_image: torch.Tensor, memory_image_pos: torch.Tensor, exclude: int = 0) -> torch.Tensor:
        """x `[B, HW, C]` (the frame's image tokens, also the constant "image" stream), memory and its
        positions `[B, K, C]` (the last `exclude` are object pointers), memory_image and positions
        `[B, K - exclude, C]` (the memory frames' image tokens) -> `[B, HW, C]`."""
        image = x
        out = x + 0.1 * src_pos
        pad = memory.shape[1] - memory_image.shape[1]
        if pad > 0:  # the pointer tokens have no image part: zeros, with the pointers' positions
            memory_image = torch.cat([memory_image, memory_image.new_zeros(memory_image.shape[0], pad,
                                                                           memory_image.shape[2])], 1)
            memory_image_pos = torch.cat([memory_image_pos, memory_pos[:, -pad:]], 1)
        for layer in self.layers:
            out = layer(image, out, memory_image, memory, memory_image_pos, self.rope, exclude)
        return self.norm(out)


class MemoryTransformer(nn.Module):
    """`transformer.encoder` in the checkpoint's names."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
