"""DINOv2 vision transformer (Oquab et al. 2023, "DINOv2: Learning Robust Visual Features without
Supervision"), in the key layout ComfyUI's `comfy/image_encoders/dino2.py` loads (the Hugging Face
`Dinov2Model` names): `embeddings.{patch_embeddings.projection, cls_token, position_embeddings,
mask_token}`, `encoder.layer.N.{norm1, attention.attention.{query,key,value}, attention.output.dense,
layer_scale1.lambda1, norm2, mlp.{fc1,fc2} | mlp.{weights_in,weights_out}, layer_scale2.lambda1}`,
`layernorm`. Written here from the paper and ComfyUI's behaviour:

- patch embedding: a stride-14 convolution; the class token is prepended; learned positions are
  added, interpolated when the patch grid is not the trained one (ComfyUI's rule: bicubic in
  float32 with scale factors `((h + 0.1) / M, (w + 0.1) / M)` over the square `M x M` grid, no
  antialiasing: the original DINOv2's rounding workaround, which Hugging Face's `size=` differs from);
- pre-norm blocks with layer scale: `x + g1 * attn(norm1(x))`, `x + g2 * mlp(norm2(x))`; the MLP is
  GELU (4x) or, for ViT-g, SwiGLU (`silu(a) * b`, hidden `((4d * 2/3) + 7) // 8 * 8`);
- `intermediate_layers`: the tokens after chosen blocks, each through the final LayerNorm, split
  into (patch tokens, class token), as DINOv2's `get_intermediate_layers(norm=True)`.

Used by MoGe (`models/moge.py`); no family of its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import attention

PATCH = 14


@dataclass(frozen=True)
class Dinov2Config:
    hidden_size: int
    num_layers: int
    num_heads: int
    position_grid: int  # M: the trained positions form an M x M grid (+1 class position)
    swiglu: bool = False
    layer_norm_eps: float = 1e-6
    patch_size: int = PATCH

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, object], prefix: str = "") -> "Dinov2Config":
        """Widths and depth from names and shapes (ComfyUI's rule: heads of 64, eps 1e-6)."""
        hidden = int(_shape(tensors[prefix + "embeddings.cls_token"])[-1])
        layer_prefix = prefix + "encoder.layer."
        depth = 1 + max(int(k[len(layer_prefix):].split(".", 1)[0]) for k in tensors if k.startswith(layer_prefix))
        positions = int(_shape(tensors[prefix + "embeddings.position_embeddings"])[1]) - 1
        grid = int(round(positions ** 0.5))
        if grid * grid != positions:
            raise ValueError(f"DINOv2 position grid must be square, got {positions} positions")
        return cls(hidden_size=hidden, num_layers=depth, num_heads=hidden // 64, position_grid=grid,
                   swiglu=(layer_prefix + "0.mlp.weights_in.weight") in tensors)


def _shape(value: object) -> tuple[int, ...]:
    return tuple(getattr(value, "shape"))


def swiglu_hidden(dim: int) -> int:
    """DINOv2's SwiGLU width: two thirds of 4 x dim, rounded up to a multiple of 8."""
    return (int(dim * 4 * 2 / 3) + 7) // 8 * 8


class _SelfAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)


class _Output(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.attention = _SelfAttention(dim)
        self.output = _Output(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, N, D]
        a = self.attention
        out = attention(a.query(x), a.key(x), a.value(x), self.heads)
        return self.output.dense(out)


class _LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lambda1 = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.lambda1


class _Mlp(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class _SwiGLU(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        hidden = swiglu_hidden(dim)
        self.weights_in = nn.Linear(dim, 2 * hidden)
        self.weights_out = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.weights_in(x).chunk(2, dim=-1)
        return self.weights_out(F.silu(a) * b)


class _Block(nn.Module):
    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        dim = config.hidden_size
        self.norm1 = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.attention = _Attention(dim, config.num_heads)
        self.layer_scale1 = _LayerScale(dim)
        self.norm2 = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.mlp = _SwiGLU(dim) if config.swiglu else _Mlp(dim)
        self.layer_scale2 = _LayerScale(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.layer_scale1(self.attention(self.norm1(x)))
        return x + self.layer_scale2(self.mlp(self.norm2(x)))


class _PatchEmbeddings(nn.Module):
    def __init__(self, dim: int, patch: int) -> None:
        super().__init__()
        self.projection = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)


class _Embeddings(nn.Module):
    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        dim = config.hidden_size
        self.patch_size = config.patch_size
        self.patch_embeddings = _PatchEmbeddings(dim, config.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.position_embeddings = nn.Parameter(torch.zeros(1, config.position_grid ** 2 + 1, dim))
        self.mask_token = nn.Parameter(torch.zeros(1, dim))  # a training parameter, kept so the file loads

    def positions(self, rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
        """[1, 1 + rows*cols, D]: the learned positions for a rows x cols patch grid."""
        pos = self.position_embeddings
        if pos.shape[1] - 1 == rows * cols:
            return pos.to(dtype)
        grid = int(round((pos.shape[1] - 1) ** 0.5))
        patch = pos[:, 1:].float().reshape(1, grid, grid, -1).permute(0, 3, 1, 2)  # [1, D, M, M]
        patch = F.interpolate(patch, scale_factor=((rows + 0.1) / grid, (cols + 0.1) / grid), mode="bicubic",
                              antialias=False)
        if tuple(patch.shape[-2:]) != (rows, cols):
            raise ValueError(f"DINOv2 positions interpolated to {tuple(patch.shape[-2:])}, wanted {(rows, cols)}")
        patch = patch.permute(0, 2, 3, 1).flatten(1, 2)
        return torch.cat([pos[:, :1].float(), patch], dim=1).to(dtype)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:  # [B, 3, H, W] -> [B, 1 + N, D]
        x = self.patch_embeddings.projection(pixels)  # [B, D, h, w]
        rows, cols = x.shape[-2:]
        x = x.flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.to(x.dtype).expand(x.shape[0], -1, -1), x], dim=1)
        return x + self.positions(rows, cols, x.dtype)


class _Encoder(nn.Module):
    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        self.layer = nn.ModuleList([_Block(config) for _ in range(config.num_layers)])


class Dinov2Model(nn.Module):
    """The DINOv2 tower. `intermediate_layers` is what MoGe reads."""

    def __init__(self, config: Dinov2Config) -> None:
        super().__init__()
        self.config = config
        self.embeddings = _Embeddings(config)
        self.encoder = _Encoder(config)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """[B, 1 + N, D]: every token after the last block and the final norm."""
        x = self.embeddings(pixels)
        for block in self.encoder.layer:
            x = block(x)
        return self.layernorm(x)

    def intermediate_layers(self, pixels: torch.Tensor, indices: Sequence[int],
                            apply_norm: bool = True) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """For each block index (negative counts from the end): (patch tokens [B, N, D], class
        token [B, D]) after that block, through the final LayerNorm when `apply_norm`."""
        depth = len(self.encoder.layer)
        wanted = [i if i >= 0 else depth + i for i in indices]
        last = max(wanted)
        x = self.embeddings(pixels)
        kept: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for i, block in enumerate(self.encoder.layer):
            x = block(x)
            if i in wanted:
                normed = self.layernorm(x) if apply_norm else x
                kept[i] = (normed[:, 1:], normed[:, 0])
            if i >= last:
                break
        return [kept[i] for i in wanted]
