"""SAM 3's vision backbone: a ViTDet trunk (windowed + global attention with 2-D axial RoPE,
tiled absolute positions) and the FPN necks (Carion et al. 2025, "SAM 3: Segment Anything with
Concepts"; Li et al. 2022, "Exploring Plain Vision Transformer Backbones for Object Detection").

Behaviour and parameter names as ComfyUI's `comfy/ldm/sam3/sam.py` (`ViTDet`, `FPNScaleConv`,
`PositionEmbeddingSine`, `SAM3VisionBackbone`), read there and written here. Sizes are read from
the weights (`Sam3Config`); the head count (16) and the global-attention blocks (every quarter of
the depth: 7, 15, 23, 31 of 32) are ComfyUI's constants.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.sam3.config import Sam3Config


def axial_rope(end_x: int, end_y: int, dim: int, theta: float = 10000.0, scale: float = 1.0) -> torch.Tensor:
    """2-D axial RoPE angles for an `end_y x end_x` grid (row-major): `[HW, dim / 2]`, the first
    half of the pairs rotating with the column, the second with the row (Flux's `EmbedND` with two
    axes of dim / 2 each: omega_j = theta^(-2j / (dim / 2)))."""
    t = torch.arange(end_x * end_y, dtype=torch.float64)
    cols, rows = (t % end_x) * scale, torch.div(t, end_x, rounding_mode="floor") * scale
    half = dim // 2
    omega = 1.0 / theta ** (torch.arange(0, half, 2, dtype=torch.float64) / half)  # [dim / 4]
    return torch.cat([cols[:, None] * omega, rows[:, None] * omega], dim=-1).float()  # [HW, dim / 2]


def apply_rope(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs (x[2i], x[2i+1]) of `x [..., N, d]` by `angles [N, d / 2]`."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    cos, sin = angles.cos(), angles.sin()
    a, b = pairs[..., 0], pairs[..., 1]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2).to(x.dtype)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
              mask: torch.Tensor | None = None) -> torch.Tensor:
    """Multi-head scaled dot-product attention over `[B, N, C]` projections -> `[B, Nq, C]`.
    `mask`: bool `[B, Nk]` (True attends) or additive `[B, heads, Nq, Nk]`."""
    b, nq, c = q.shape
    d = c // heads

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(b, t.shape[1], heads, d).transpose(1, 2)

    if mask is not None and mask.dtype == torch.bool and mask.ndim == 2:
        mask = mask[:, None, None, :]
    out = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=mask)
    return out.transpose(1, 2).reshape(b, nq, c)


def _partition(x: torch.Tensor, w: int) -> tuple[torch.Tensor, tuple[int, int]]:
    """`[B, H, W, C]` -> windows `[B * nW, w, w, C]` (zero padding to a multiple of w)."""
    b, h, wd, c = x.shape
    ph, pw = (w - h % w) % w, (w - wd % w) % w
    if ph or pw:
        x = F.pad(x, (0, 0, 0, pw, 0, ph))
    hp, wp = h + ph, wd + pw
    x = x.view(b, hp // w, w, wp // w, w, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, w, w, c), (hp, wp)


def _unpartition(windows: torch.Tensor, w: int, padded: tuple[int, int], size: tuple[int, int]) -> torch.Tensor:
    hp, wp = padded
    b = windows.shape[0] // ((hp // w) * (wp // w))
    x = windows.view(b, hp // w, wp // w, w, w, -1).permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, -1)
    return x[:, :size[0], :size[1]].contiguous()


class VitAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = apply_rope(q, angles), apply_rope(k, angles)
        out = F.scaled_dot_product_attention(q, k, v)  # [B, heads, N, d]
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class VitMlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class VitBlock(nn.Module):
    """Pre-norm block; `window` > 0 attends inside non-overlapping windows, 0 globally."""

    def __init__(self, dim: int, heads: int, hidden: int, window: int) -> None:
        super().__init__()
        self.window = window
        self.norm1 = nn.LayerNorm(dim)
        self.attn = VitAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = VitMlp(dim, hidden)

    def forward(self, x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:  # x [B, H, W, C]
        b, h, w, c = x.shape
        y = self.norm1(x)
        if self.window > 0:
            win, padded = _partition(y, self.window)
            y = self.attn(win.reshape(win.shape[0], -1, c), angles)
            y = _unpartition(y.view(-1, self.window, self.window, c), self.window, padded, (h, w))
        else:
            y = self.attn(y.reshape(b, h * w, c), angles).view(b, h, w, c)
        x = x + y
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, patch: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, kernel_size=patch, stride=patch, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class ViTDet(nn.Module):
    """`[B, 3, S, S]` -> `[B, C, S / p, S / p]`."""

    def __init__(self, config: Sam3Config) -> None:
        super().__init__()
        dim, heads = config.vit_dim, config.vit_heads
        self.patch_embed = PatchEmbed(config.patch, dim)
        self.pos_embed = nn.Parameter(torch.zeros(1, config.pretrain_grid ** 2 + 1, dim))
        self.ln_pre = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList(
            VitBlock(dim, heads, config.vit_mlp, 0 if i in config.global_blocks else config.window)
            for i in range(config.vit_depth))
        grid = config.image_size // config.patch
        head_dim = dim // heads
        self.register_buffer("rope_global", axial_rope(grid, grid, head_dim, scale=config.pretrain_grid / grid),
                             persistent=False)
        self.register_buffer("rope_window", axial_rope(config.window, config.window, head_dim), persistent=False)

    def _positions(self, grid: int) -> torch.Tensor:
        """The pretraining grid's absolute positions tiled (not interpolated) over `grid x grid`."""
        spatial = self.pos_embed[:, 1:]
        old = int(math.isqrt(spatial.shape[1]))
        if old == grid:
            return spatial
        tiles = grid // old + 1
        s = spatial.reshape(1, old, old, -1).permute(0, 3, 1, 2).tile(1, 1, tiles, tiles)[:, :, :grid, :grid]
        return s.permute(0, 2, 3, 1).reshape(1, grid * grid, -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        b, c, h, w = x.shape
        x = x.permute(0, 2, 3, 1).reshape(b, h * w, c) + self._positions(h).to(x.dtype)
        x = self.ln_pre(x.view(b, h, w, c))
        for block in self.blocks:
            x = block(x, self.rope_window if block.window > 0 else self.rope_global)
        return x.permute(0, 3, 1, 2)


class FPNScaleConv(nn.Module):
    """One neck level: transposed convolutions up (x4, x2), identity, or max-pool down (x0.5),
    then 1x1 and 3x3 convolutions to the detector width."""

    def __init__(self, in_dim: int, out_dim: int, scale: float) -> None:
        super().__init__()
        self.scale = scale
        proj_in = in_dim
        if scale == 4.0:
            self.dconv_2x2_0 = nn.ConvTranspose2d(in_dim, in_dim // 2, 2, stride=2)
            self.dconv_2x2_1 = nn.ConvTranspose2d(in_dim // 2, in_dim // 4, 2, stride=2)
            proj_in = in_dim // 4
        elif scale == 2.0:
            self.dconv_2x2 = nn.ConvTranspose2d(in_dim, in_dim // 2, 2, stride=2)
            proj_in = in_dim // 2
        self.conv_1x1 = nn.Conv2d(proj_in, out_dim, 1)
        self.conv_3x3 = nn.Conv2d(out_dim, out_dim, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scale == 4.0:
            x = self.dconv_2x2_1(F.gelu(self.dconv_2x2_0(x)))
        elif self.scale == 2.0:
            x = self.dconv_2x2(x)
        elif self.scale == 0.5:
            x = F.max_pool2d(x, 2, 2)
        return self.conv_3x3(self.conv_1x1(x))


class PositionEmbeddingSine(nn.Module):
    """DETR's 2-D sine positions (normalised to 0..2pi), `num_pos_feats` channels: y then x."""

    def __init__(self, num_pos_feats: int, temperature: float = 10000.0) -> None:
        super().__init__()
        self.half = num_pos_feats // 2
        self.temperature = temperature
        self.scale = 2 * math.pi

    def _freqs(self, device: torch.device) -> torch.Tensor:
        i = torch.arange(self.half, dtype=torch.float32, device=device)
        return self.temperature ** (2 * torch.div(i, 2, rounding_mode="floor") / self.half)

    def sincos(self, values: torch.Tensor) -> torch.Tensor:
        """`[...]` values in 0..1 -> `[..., half]` interleaved sin / cos features."""
        raw = values[..., None] * self.scale / self._freqs(values.device)
        return torch.stack((raw[..., 0::2].sin(), raw[..., 1::2].cos()), dim=-1).flatten(-2)

    def encode_boxes(self, cx: torch.Tensor, cy: torch.Tensor, w: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Box centres and sizes `[N]` -> `[N, 2 * half + 2]` (y, x features, then h, w)."""
        return torch.cat((self.sincos(cy), self.sincos(cx), h[:, None], w[:, None]), dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        gy = torch.arange(h, dtype=torch.float32, device=x.device) / (h - 1 + 1e-6)
        gx = torch.arange(w, dtype=torch.float32, device=x.device) / (w - 1 + 1e-6)
        yy, xx = torch.meshgrid(gy, gx, indexing="ij")
        pos = torch.cat((self.sincos(yy), self.sincos(xx)), dim=-1).permute(2, 0, 1).unsqueeze(0)
        return pos.expand(b, -1, -1, -1).to(x.dtype)


class VisionBackbone(nn.Module):
    """Trunk + the detector's neck (`convs`) + the tracker's necks: SAM 3 `sam2_convs` (4 levels),
    SAM 3.1 `propagation_convs` / `interactive_convs` (3 levels)."""

    def __init__(self, config: Sam3Config) -> None:
        super().__init__()
        self.multiplex = config.multiplex
        self.trunk = ViTDet(config)
        self.position_encoding = PositionEmbeddingSine(config.d_model)
        scales = (4.0, 2.0, 1.0) if config.multiplex else (4.0, 2.0, 1.0, 0.5)

        def neck() -> nn.ModuleList:
            return nn.ModuleList(FPNScaleConv(config.vit_dim, config.d_model, s) for s in scales)

        self.convs = neck()
        if config.multiplex:
            self.propagation_convs = neck()
            self.interactive_convs = neck()
        else:
            self.sam2_convs = neck()

    def levels(self, trunk: torch.Tensor, neck: nn.ModuleList) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The neck's feature maps of a trunk output and their sine positions."""
        features = [conv(trunk) for conv in neck]
        return features, [self.position_encoding(f) for f in features]

    def tracker_neck(self, interactive: bool) -> nn.ModuleList:
        if self.multiplex:
            return self.interactive_convs if interactive else self.propagation_convs
        return self.sam2_convs
