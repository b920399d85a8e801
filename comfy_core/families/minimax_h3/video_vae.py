"""MiniMax H3's video VAE: a 3-D causal CNN encoder and a ViT3D decoder.

After Comfy-Org/ComfyUI comfy/ldm/minimax/vae.py (`MiniMaxH3VideoVAE`) and the way comfy/sd.py
builds it (a state dict holding `decoder.transformer_blocks.0.scale1` and
`encoder.down.5.block.0.conv1.weight`); written here from that behaviour.

- Encoder: `conv_in`, six levels of causal residual blocks (GroupNorm of 32 groups with
  statistics per frame, SiLU, 3x3x3 convolutions padded reflect in space and with zeros in front
  in time), stride-2 downsamplers at levels 0-3 in space and 1-2 in time (16x, 4x), `norm_out`,
  `conv_out` to the posterior moments; `quant_conv` (1x1x1). Pixels enter in -1..1 and are
  mapped to ImageNet-normalised 0..1 first.
- Decoder: `post_quant_conv`, then a ViT over the latent grid (one token per latent position,
  `x_embedder`), plus register tokens and one zero token; pre-norm blocks (RMSNorm) with fused
  per-head-interleaved q/k/v, per-head RMSNorm on q and k, 3-D RoPE (ids in -1..1 at cell
  centres, angle 2 pi id f, f = 100^-(6i/d) for i < d/6 per axis, over the first 3/4 of each
  head, split-half pairs), a SwiGLU MLP (x4), residuals scaled per channel (`scale1`,
  `scale2`); LayerNorm and `proj_out` to 3 x 4 x 16 x 16 pixels per token.
- Latent: the posterior mean `[B, 24, T', H/16, W/16]` normalised by the file's per-channel
  `latents_mean` / `latents_std`; frames 17k+5 <-> latents 5k+2 (clips of 17 frames, each 5
  latents, the last 3 latents dropped); decode works in chunks of 5 latents (+2 overlap),
  cross-fading 5 frames; space is tiled at 256 pixels (overlap >= 64), cross-faded linearly.

The decoder's linear layers (`to_qkv`, `to_out`, `w1`, `w2`) may be stored int8 ConvRot
(`minimax_h3_video_vae_int8_convrot.safetensors`): they load as `QuantizedLinear`s
(comfy_core/models/quant_linear.py). `MiniMaxH3VideoVaePatcher` is the VAE object (ComfyUI's
attributes for this VAE); this module registers its state-dict kind in
`comfy_core.patching.vae.STATE_DICT_KINDS`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import attention_heads
from comfy_core.models.quant_linear import attach_quantized, detach_quantized_weights
from comfy_core.models.vae import VAEConfigError
from comfy_core.patching.vae import STATE_DICT_KINDS, VaePatcher
from comfy_core.weights.quant_registry import QuantFormatError, quantized_layers

MARKERS = ("decoder.transformer_blocks.0.scale1", "encoder.down.5.block.0.conv1.weight")  # ComfyUI's test
# What the weights cannot show (ComfyUI's constants for this VAE).
SPACE_DOWN, TIME_DOWN = (2, 2, 2, 2, 1, 1), (1, 2, 2, 1, 1, 1)
HEAD_DIM, ROPE_FRACTION, ROPE_THETA = 64, 0.75, 100.0
NORM_GROUPS, CONV_NORM_EPS, VIT_EPS = 32, 1e-6, 1e-5
PIXEL_MEAN, PIXEL_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet's
CLIP_LENGTH, TOKEN_DROP, TILE_SIZE, TILE_OVERLAP_MIN = 17, 3, 256, 64


class MiniMaxH3VideoVAEError(VAEConfigError):
    """MiniMax H3 video VAE weights that do not fit the architecture, or an input of the wrong shape."""


def is_minimax_h3_video_vae(names: Iterable[str]) -> bool:
    """Whether tensor `names` hold this VAE (ComfyUI's two marker names)."""
    names = set(names)
    return all(marker in names for marker in MARKERS)


@dataclass(frozen=True)
class MiniMaxH3VideoVAEConfig:
    """Widths and depths (read from the weights); strides, head width, clip and tile sizes are ComfyUI's."""

    in_channels: int = 3
    ch: int = 128
    ch_mult: tuple[int, ...] = (1, 2, 2, 4, 4, 8)
    num_res_blocks: tuple[int, ...] = (2, 2, 2, 2, 2, 2)
    z_channels: int = 24
    embed_dim: int = 24
    width: int = 2048  # decoder token width (heads x 64)
    depth: int = 36
    register_tokens: int = 4
    out_channels: int = 3
    clip_length: int = CLIP_LENGTH
    token_drop: int = TOKEN_DROP
    tile_size: int = TILE_SIZE
    tile_overlap_min: int = TILE_OVERLAP_MIN

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "MiniMaxH3VideoVAEConfig":
        """The config of the tensors under `prefix` (name -> anything with `.shape`)."""
        def shape(name: str) -> tuple[int, ...]:
            if prefix + name not in tensors:
                raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE: missing tensor {prefix + name!r}")
            return tuple(tensors[prefix + name].shape)

        ch, in_channels = shape("encoder.conv_in.weight")[:2]
        levels = 0
        while f"{prefix}encoder.down.{levels}.block.0.conv1.weight" in tensors:
            levels += 1
        if levels != len(SPACE_DOWN):
            raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE: {levels} encoder levels, the architecture has "
                                         f"{len(SPACE_DOWN)}")
        mult, blocks = [], []
        for level in range(levels):
            width = shape(f"encoder.down.{level}.block.0.conv1.weight")[0]
            if width % ch or width % NORM_GROUPS:
                raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE: level {level} width {width} is not a multiple "
                                             f"of conv_in's {ch} and of {NORM_GROUPS} norm groups")
            mult.append(width // ch)
            count = 0
            while f"{prefix}encoder.down.{level}.block.{count}.conv1.weight" in tensors:
                count += 1
            blocks.append(count)
            has_down = f"{prefix}encoder.down.{level}.downsample.conv.weight" in tensors
            if has_down != (SPACE_DOWN[level] * TIME_DOWN[level] > 1):
                raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE: encoder level {level} "
                                             f"{'has' if has_down else 'lacks'} a downsampler; the architecture "
                                             "downsamples at levels 0-3 only")
        z2 = shape("encoder.conv_out.weight")[0]
        embed2 = shape("quant_conv.weight")[0]
        width, z_in = shape("decoder.x_embedder.weight")
        depth = 0
        while f"{prefix}decoder.transformer_blocks.{depth}.scale1" in tensors:
            depth += 1
        if width % HEAD_DIM:
            raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE: decoder width {width} is not a multiple of the "
                                         f"{HEAD_DIM}-wide heads")
        patch = math.prod(SPACE_DOWN) ** 2 * math.prod(TIME_DOWN)
        out_rows = shape("decoder.proj_out.weight")[0]
        if out_rows % patch:
            raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE: proj_out has {out_rows} rows, not a multiple of "
                                         f"the {patch} pixels of a token")
        config = cls(in_channels=in_channels, ch=ch, ch_mult=tuple(mult), num_res_blocks=tuple(blocks),
                     z_channels=z2 // 2, embed_dim=embed2 // 2, width=width, depth=depth,
                     register_tokens=shape("decoder.register_tokens")[1], out_channels=out_rows // patch)
        if z_in != config.z_channels or shape("post_quant_conv.weight")[:2] != (config.z_channels, config.embed_dim):
            raise MiniMaxH3VideoVAEError("MiniMax H3 video VAE: decoder input width does not match the encoder's "
                                         "latent channels")
        for name in ("latents_mean", "latents_std"):
            if shape(name) != (config.embed_dim,):
                raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE: {name} has shape {list(shape(name))}, "
                                             f"expected [{config.embed_dim}]")
        return config


# --- the causal CNN encoder ---

class CausalConv3d(nn.Conv3d):
    """Conv3d padded reflect in space and with 2 x `pad_t` zero frames in front (causal in time)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: Any = 1, padding: Any = 0) -> None:
        super().__init__(cin, cout, kernel_size=kernel, stride=stride)
        self.causal_padding = (padding,) * 3 if isinstance(padding, int) else tuple(padding)

    def forward(self, x: torch.Tensor, spatial_pad: tuple[int, int, int, int] | None = None) -> torch.Tensor:
        pad_t, pad_h, pad_w = self.causal_padding
        spatial = (pad_w, pad_w, pad_h, pad_h) if spatial_pad is None else spatial_pad
        if any(spatial):
            x = F.pad(x, (*spatial, 0, 0), mode="reflect")
        if pad_t:  # one frame alone: the zero frames only mute the earlier taps, as ComfyUI's shortcut does
            x = F.pad(x, (0, 0, 0, 0, 2 * pad_t, 0))
        return super().forward(x)


def _frame_norm(norm: nn.GroupNorm, x: torch.Tensor) -> torch.Tensor:
    """GroupNorm with statistics per frame: [B, C, T, H, W] with time folded into the batch."""
    b, c, t, h, w = x.shape
    y = norm(x.transpose(1, 2).reshape(b * t, c, h, w))
    return y.reshape(b, t, c, h, w).transpose(1, 2)


class ResnetBlock3D(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(NORM_GROUPS, cin, eps=CONV_NORM_EPS)
        self.conv1 = CausalConv3d(cin, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(NORM_GROUPS, cout, eps=CONV_NORM_EPS)
        self.conv2 = CausalConv3d(cout, cout, 3, padding=1)
        if cin != cout:
            self.nin_shortcut = CausalConv3d(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(_frame_norm(self.norm1, x)))
        h = self.conv2(F.silu(_frame_norm(self.norm2, h)))
        return h + (self.nin_shortcut(x) if hasattr(self, "nin_shortcut") else x)


class Downsample3D(nn.Module):
    def __init__(self, channels: int, time_stride: int, space_stride: int) -> None:
        super().__init__()
        self.space_stride = space_stride
        self.conv = CausalConv3d(channels, channels, 3, stride=(time_stride, space_stride, space_stride),
                                 padding=(1, 0, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # stride 2 in space: one reflected row / column after the image (H -> H / 2)
        return self.conv(x, spatial_pad=(0, 1, 0, 1) if self.space_stride == 2 else None)


class EncoderFCN3D(nn.Module):
    def __init__(self, config: MiniMaxH3VideoVAEConfig) -> None:
        super().__init__()
        widths = [config.ch * m for m in config.ch_mult]
        self.conv_in = CausalConv3d(config.in_channels, widths[0], 3, padding=1)
        self.down = nn.ModuleList()
        cin = widths[0]
        for level, width in enumerate(widths):
            stage = nn.Module()
            stage.block = nn.ModuleList(ResnetBlock3D(cin if i == 0 else width, width)
                                        for i in range(config.num_res_blocks[level]))
            if SPACE_DOWN[level] * TIME_DOWN[level] > 1:
                stage.downsample = Downsample3D(width, TIME_DOWN[level], SPACE_DOWN[level])
            self.down.append(stage)
            cin = width
        self.norm_out = nn.GroupNorm(NORM_GROUPS, widths[-1], eps=CONV_NORM_EPS)
        self.conv_out = CausalConv3d(widths[-1], 2 * config.z_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for stage in self.down:
            for block in stage.block:
                h = block(h)
            if hasattr(stage, "downsample"):
                h = stage.downsample(h)
        return self.conv_out(F.silu(_frame_norm(self.norm_out, h)))


# --- the ViT3D decoder ---

def token_ids(t: int, h: int, w: int, device: Any, dtype: torch.dtype) -> torch.Tensor:
    """[t*h*w, 3] positions of the latent cells' centres in -1..1 along each axis (t, h, w order)."""
    axes = [(torch.arange(n, device=device, dtype=dtype) + 0.5) / n * 2.0 - 1.0 for n in (t, h, w)]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, 3)


def rope_angles(ids: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    """[S, 3] ids -> [S, rotary_dim / 2] angles 2 pi id f, axis-major (t's frequencies, then h's, w's),
    f = theta^-(6 i / rotary_dim) for i < rotary_dim / 6."""
    freqs = ROPE_THETA ** -torch.arange(0, 1, 6 / rotary_dim, dtype=torch.float32, device=ids.device)
    return (2.0 * math.pi * ids.float()[:, :, None] * freqs).reshape(ids.shape[0], -1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first 2 x `cos.shape[-1]` channels of x [B, S, H, d] in split-half pairs
    (channel i with channel i + half); the rest pass through."""
    half = cos.shape[-1]
    a, b, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    cos, sin = cos[None, :, None, :].to(x.dtype), sin[None, :, None, :].to(x.dtype)
    return torch.cat([a * cos - b * sin, a * sin + b * cos, rest], dim=-1)


class Attention(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.heads = width // HEAD_DIM
        self.to_qkv = nn.Linear(width, 3 * width)
        self.to_out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        qkv = self.to_qkv(x).view(b, s, self.heads, 3 * HEAD_DIM)  # q, k, v side by side in each head
        q, k, v = qkv.chunk(3, dim=-1)
        q = apply_rope(F.rms_norm(q, (HEAD_DIM,), eps=VIT_EPS), cos, sin)
        k = apply_rope(F.rms_norm(k, (HEAD_DIM,), eps=VIT_EPS), cos, sin)
        out = attention_heads(*(t.transpose(1, 2) for t in (q, k, v)))  # [B, H, S, d]
        return self.to_out(torch.nan_to_num(out.transpose(1, 2).reshape(b, s, -1)))


class FeedForward(nn.Module):
    def __init__(self, width: int, mult: int = 4) -> None:
        super().__init__()
        self.w1 = nn.Linear(width, 2 * mult * width)
        self.w2 = nn.Linear(mult * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w1(x).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)


class TransformerBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(width, eps=VIT_EPS)
        self.attn = Attention(width)
        self.scale1 = nn.Parameter(torch.ones(width))
        self.norm2 = nn.RMSNorm(width, eps=VIT_EPS)
        self.ff = FeedForward(width)
        self.scale2 = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.scale1.to(x.dtype) * self.attn(self.norm1(x), cos, sin)
        return x + self.scale2.to(x.dtype) * self.ff(self.norm2(x))


class ViT3DDecoder(nn.Module):
    def __init__(self, config: MiniMaxH3VideoVAEConfig) -> None:
        super().__init__()
        width = config.width
        self.patch, self.patch_t = math.prod(SPACE_DOWN), math.prod(TIME_DOWN)
        self.out_channels = config.out_channels
        self.x_embedder = nn.Linear(config.z_channels, width)
        self.register_tokens = nn.Parameter(torch.zeros(1, config.register_tokens, width))
        self.register_buffer("mask_token", torch.zeros(1, 1, width))  # in the file, unused at inference
        self.transformer_blocks = nn.ModuleList(TransformerBlock(width) for _ in range(config.depth))
        self.norm_out = nn.LayerNorm(width, eps=VIT_EPS)
        self.proj_out = nn.Linear(width, config.out_channels * self.patch_t * self.patch ** 2)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """[B, C, t, h, w] -> [B, 3, 4t, 16h, 16w] (ImageNet-normalised pixels)."""
        b, _, t, h, w = z.shape
        x = self.x_embedder(z.flatten(2).transpose(1, 2))  # [B, t*h*w, width]
        cells = x.shape[1]
        suffix = self.register_tokens.to(x.dtype).expand(b, -1, -1)
        x = torch.cat([x, suffix, torch.zeros_like(x[:, :1])], dim=1)  # registers, then one zero token
        ids = torch.cat([token_ids(t, h, w, z.device, z.dtype), z.new_zeros(x.shape[1] - cells, 3)])
        angles = rope_angles(ids, int(HEAD_DIM * ROPE_FRACTION))  # float32; ids in the latent's dtype, as ComfyUI
        cos, sin = angles.cos().to(z.dtype), angles.sin().to(z.dtype)
        for block in self.transformer_blocks:
            x = block(x, cos, sin)
        out = self.proj_out(self.norm_out(x))[:, :cells]
        p, pt = self.patch, self.patch_t
        out = out.view(b, t, h, w, self.out_channels, pt, p, p).permute(0, 4, 1, 5, 2, 6, 3, 7)
        return out.reshape(b, self.out_channels, t * pt, h * p, w * p)


# --- tiles and chunks (ComfyUI's plan, in pure functions) ---

def tile_plan(length: int, tile: int, overlap_min: int, unit: int) -> tuple[list[int], list[int], list[int]]:
    """(starts, sizes, overlaps) of tiles of `tile` covering `length`: as few as fit with overlaps of
    at least `min(overlap_min, tile - unit)`, the spare spread over the overlaps in `unit` steps."""
    if tile >= length:
        return [0], [length], []
    count = math.ceil(length / tile)
    base = max(0, min(overlap_min, tile - unit))
    while tile * count - base * (count - 1) < length:
        count += 1
    overlaps = [base] * (count - 1)
    for i in range((tile * count - base * (count - 1) - length) // unit):
        overlaps[i % (count - 1)] += unit
    starts = [0]
    for lap in overlaps:
        starts.append(starts[-1] + tile - lap)
    return starts, [tile] * count, overlaps


def blend(a: torch.Tensor, b: torch.Tensor, extent: int, dim: int) -> torch.Tensor:
    """b with its first `extent` entries along `dim` cross-faded linearly from a's last ones (weight
    of b: i / extent)."""
    extent = min(a.shape[dim], b.shape[dim], extent)
    if extent <= 0:
        return b
    shape = [1] * a.ndim
    shape[dim] = extent
    ramp = (torch.arange(extent, device=b.device, dtype=b.dtype) / extent).view(shape)
    mixed = a.narrow(dim, a.shape[dim] - extent, extent) * (1 - ramp) + b.narrow(dim, 0, extent) * ramp
    return torch.cat([mixed, b.narrow(dim, extent, b.shape[dim] - extent)], dim=dim)


def stitch(grid: list[list[torch.Tensor]], y_laps: list[int], x_laps: list[int]) -> torch.Tensor:
    """Tiles (rows of [..., h, w]) blended with the original tiles above and to the left over the
    overlaps, each tile's trailing overlaps cut, joined."""
    rows = []
    for i, row in enumerate(grid):
        pieces = []
        for j, tile in enumerate(row):
            if i > 0:
                tile = blend(grid[i - 1][j], tile, y_laps[i - 1], -2)
            if j > 0:
                tile = blend(row[j - 1], tile, x_laps[j - 1], -1)
            if i < len(grid) - 1:
                tile = tile[..., :tile.shape[-2] - y_laps[i], :]
            if j < len(row) - 1:
                tile = tile[..., :tile.shape[-1] - x_laps[j]]
            pieces.append(tile)
        rows.append(torch.cat(pieces, dim=-1))
    return torch.cat(rows, dim=-2)


class MiniMaxH3VideoVAE(nn.Module):
    """The VAE (see the module docstring): `encode` pixels [B, 3, T, H, W] in -1..1 -> normalised
    latents; `decode` latents -> float32 pixels [B, 3, T, H, W] in 0..1."""

    latent_dim = 3

    def __init__(self, config: MiniMaxH3VideoVAEConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = EncoderFCN3D(config)
        self.quant_conv = nn.Conv3d(2 * config.z_channels, 2 * config.embed_dim, 1)
        self.post_quant_conv = nn.Conv3d(config.embed_dim, config.z_channels, 1)
        self.decoder = ViT3DDecoder(config)
        self.register_buffer("latents_mean", torch.zeros(config.embed_dim))
        self.register_buffer("latents_std", torch.ones(config.embed_dim))
        self.downscale_ratio = math.prod(SPACE_DOWN)
        self.temporal_ratio = math.prod(TIME_DOWN)
        self.latent_channels = config.embed_dim
        t = self.temporal_ratio
        self.pre_padding = (-config.clip_length) % t  # frames the decoder makes before a clip's first
        self.chunk = math.ceil(config.clip_length / t)  # latents per clip
        self.chunk_overlap = (-config.token_drop) % self.chunk
        self.frame_overlap = max(self.chunk_overlap * t - self.pre_padding, 0)

    # single passes
    def _pixels_in(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = (torch.tensor(v, device=x.device, dtype=x.dtype).view(1, 3, 1, 1, 1)
                     for v in (PIXEL_MEAN, PIXEL_STD))
        return ((x + 1.0) * 0.5 - mean) / std

    def _pixels_out(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = (torch.tensor(v, device=x.device).view(1, 3, 1, 1, 1) for v in (PIXEL_MEAN, PIXEL_STD))
        return (x.float() * std + mean).clamp(0.0, 1.0)

    def _moments(self, x: torch.Tensor) -> torch.Tensor:
        """Tiled in space as ComfyUI (one tile up to `tile_size` pixels)."""
        ratio, tile = self.downscale_ratio, self.config.tile_size
        ys, yl, yo = tile_plan(x.shape[-2], tile, self.config.tile_overlap_min, ratio)
        xs, xl, xo = tile_plan(x.shape[-1], tile, self.config.tile_overlap_min, ratio)
        grid = [[self.quant_conv(self.encoder(x[..., i:i + h, j:j + w])) for j, w in zip(xs, xl)]
                for i, h in zip(ys, yl)]
        return stitch(grid, [o // ratio for o in yo], [o // ratio for o in xo])

    def _pixels(self, z: torch.Tensor) -> torch.Tensor:
        """Denormalised latents -> raw decoder output, tiled in space at `tile_size` pixels."""
        ratio, tile = self.downscale_ratio, self.config.tile_size
        ys, yl, yo = tile_plan(z.shape[-2] * ratio, tile, self.config.tile_overlap_min, ratio)
        xs, xl, xo = tile_plan(z.shape[-1] * ratio, tile, self.config.tile_overlap_min, ratio)
        grid = [[self.decoder(self.post_quant_conv(z[..., i // ratio:(i + h) // ratio, j // ratio:(j + w) // ratio]))
                 for j, w in zip(xs, xl)] for i, h in zip(ys, yl)]
        return stitch(grid, yo, xo)

    # latents
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Pixels [B, 3, T, H, W] in -1..1 (H, W multiples of 16) -> normalised latents
        [B, C, T', H/16, W/16] (float32): one frame -> one latent; else clips of `clip_length`
        frames (the last padded with its last frame), `token_drop` latents dropped at the end."""
        if x.ndim != 5 or x.shape[1] != self.config.in_channels:
            raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE encode: expected pixels [B, "
                                         f"{self.config.in_channels}, T, H, W], got {tuple(x.shape)}")
        if x.shape[-1] % self.downscale_ratio or x.shape[-2] % self.downscale_ratio:
            raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE encode: height and width must be multiples of "
                                         f"{self.downscale_ratio}, got {tuple(x.shape[-2:])}")
        clip = self.config.clip_length
        if x.shape[2] == 1:
            moments = self._moments(self._pixels_in(x))[:, :, -1:]
        else:
            parts = []
            for start in range(0, x.shape[2], clip):
                piece = x[:, :, start:start + clip]
                if piece.shape[2] < clip:
                    piece = torch.cat([piece, piece[:, :, -1:].expand(-1, -1, clip - piece.shape[2], -1, -1)], 2)
                parts.append(self._moments(self._pixels_in(piece)))
            moments = torch.cat(parts, dim=2)
            if self.config.token_drop:
                moments = moments[:, :, :moments.shape[2] - self.config.token_drop]
        mean = moments.float().chunk(2, dim=1)[0]
        return (mean - self.latents_mean.float().view(1, -1, 1, 1, 1)) / self.latents_std.float().view(1, -1, 1, 1, 1)

    def _chunk_plan(self, latents: int) -> tuple[int, int]:
        """(latents repeated at the end, chunks) of a temporal decode."""
        total = latents + self.config.token_drop
        pad = (-total) % self.chunk
        chunks = (total + pad) // self.chunk - int(self.config.token_drop > 0)
        if chunks < 1:  # too few latents for one chunk: one more chunk of padding
            pad, chunks = pad + self.chunk, chunks + 1
        return pad, chunks

    def _pad_frames(self, latents: int, pad: int) -> int:
        """Frames the `pad` repeated latents after `latents` real ones decode to (cut at the end)."""
        tail = self.config.clip_length % self.temporal_ratio
        if pad <= 0:
            return 0
        if tail == 0:
            return pad * self.temporal_ratio
        return sum(tail if (latents + k) % self.chunk == 0 else self.temporal_ratio for k in range(pad))

    def decoded_frames(self, latents: int) -> int:
        """Frames a decode of `latents` latent frames returns (ComfyUI's plan; 5k+2 -> 17k+5)."""
        if latents == 1:
            return 1
        pad, chunks = self._chunk_plan(latents)
        total, span = latents + pad, self.chunk * self.temporal_ratio
        made = last_overlap = 0
        for i in range(chunks):
            frames = (min(i * self.chunk + self.chunk + self.chunk_overlap, total) - min(i * self.chunk, total)) * \
                self.temporal_ratio
            for j in range(int(self.config.token_drop > 0) + 1):
                got = max(0, min(j * span + span, frames) - j * span - self.pre_padding)
                if j == 0:
                    made += got
                else:
                    last_overlap = got
        return made + last_overlap - self._pad_frames(latents, pad)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Normalised latents [B, C, T', h, w] -> float32 pixels [B, 3, T, 16h, 16w] in 0..1."""
        if z.ndim != 5 or z.shape[1] != self.latent_channels:
            raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE decode: expected a latent [B, {self.latent_channels}, "
                                         f"T, h, w], got {tuple(z.shape)}")
        z = z * self.latents_std.to(z.dtype).view(1, -1, 1, 1, 1) + self.latents_mean.to(z.dtype).view(1, -1, 1, 1, 1)
        if z.shape[2] == 1:
            return self._pixels_out(self._pixels(z)[:, :, -1:])
        latents = z.shape[2]
        pad, chunks = self._chunk_plan(latents)
        if pad:
            z = torch.cat([z, z[:, :, -1:].expand(-1, -1, pad, -1, -1)], dim=2)
        span, splits = self.chunk * self.temporal_ratio, int(self.config.token_drop > 0) + 1
        parts, carry = [], None
        for i in range(chunks):
            start = i * self.chunk
            frames = self._pixels(z[:, :, start:start + self.chunk + self.chunk_overlap])  # raw: blended, then mapped
            for j in range(splits):
                piece = frames[:, :, j * span:(j + 1) * span][:, :, self.pre_padding:]
                if j == 0:
                    if carry is not None:
                        piece, carry = blend(carry, piece, self.frame_overlap, 2), None
                    parts.append(piece)
                else:
                    carry = piece
        if carry is not None:
            parts.append(carry)
        return self._pixels_out(torch.cat(parts, dim=2)[:, :, :self.decoded_frames(latents)])


def video_vae_from_state_dict(sd: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None,
                              dtype: torch.dtype = torch.float32) -> MiniMaxH3VideoVAE:
    """The VAE of a state dict in ComfyUI's names (float or int8 ConvRot decoder layers, described by
    `<layer>.comfy_quant` tensors or the `_quantization_metadata` entry of `metadata`)."""
    config = MiniMaxH3VideoVAEConfig.detect_from_weights(sd)

    class _Info:
        def __init__(self, t: torch.Tensor) -> None:
            self.dtype = {torch.int8: "I8", torch.uint8: "U8"}.get(t.dtype, str(t.dtype))
            self.shape = tuple(t.shape)

    try:
        layers = quantized_layers({k: _Info(v) for k, v in sd.items()}, metadata, lambda name: sd[name])
    except QuantFormatError as exc:
        raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE: {exc}") from None
    with torch.device("meta"):
        model = MiniMaxH3VideoVAE(config)
    if layers:
        detach_quantized_weights(model, layers, "")
    # a quantised layer's stored weight, scales and description are attached below; its bias loads here
    quant_names = {k for k in sd if k.rsplit(".", 1)[0] in layers and not k.endswith(".bias")}
    state = {k: v for k, v in sd.items() if k not in quant_names}
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False,
                                                assign=True)
    missing = [k for k in missing if k.rsplit(".", 1)[0] not in layers]
    if missing or unexpected:
        raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE: missing tensors {missing[:5]}, "
                                     f"unexpected {unexpected[:5]}")
    if layers:
        attach_quantized(model, layers, sd.keys(), lambda name: sd[name], "", dtype)
    return model.eval()


def _frames_to_latents(frames: int) -> int:
    return max(1, (frames - 5) // 17 * 5 + 2) if frames > 1 else 1


def _latents_to_frames(latents: int) -> int:
    return max(1, (latents - 2) // 5 * 17 + 5)


class MiniMaxH3VideoVaePatcher(VaePatcher):
    """The VAE object for `MiniMaxH3VideoVAE`, answering as ComfyUI's `comfy.sd.VAE` does for it:
    `encode(frames [T, H, W, C] in 0..1)` -> `[1, 24, T', H/16, W/16]` (videos `[B, T, H, W, C]`
    likewise), `decode` -> `[B, T, H, W, 3]`; ratios `(frames map, 16, 16)`, index formulas
    (4, 16, 16); it tiles and chunks itself (`decode_tiled` / `encode_tiled` are `decode` /
    `encode`, as ComfyUI's `handles_tiling`)."""

    def __init__(self, model: nn.Module | Mapping[str, torch.Tensor] | None = None,
                 load_device: torch.device | str | None = None, offload_device: torch.device | str | None = None,
                 *, sd: Mapping[str, torch.Tensor] | None = None, device: torch.device | str | None = None,
                 config: Any = None, dtype: torch.dtype | None = None, metadata: Mapping[str, str] | None = None,
                 cache_patched_weights: bool = True) -> None:
        if config is not None:
            raise MiniMaxH3VideoVAEError("comfy.sd.VAE(config=...) with a MiniMax H3 video VAE state dict: the "
                                         "architecture is read from the weights")
        if isinstance(model, Mapping):
            model, sd = None, model
        load = load_device if load_device is not None else device
        if model is None:
            if sd is None:
                raise TypeError("MiniMaxH3VideoVaePatcher: give the VAE or its state dict (sd=...)")
            # ComfyUI's working dtypes: float16 where the device runs it, else float32 (never bfloat16)
            on_gpu = load is not None and torch.device(load).type == "cuda"
            model = video_vae_from_state_dict(sd, metadata, dtype or (torch.float16 if on_gpu else torch.float32))
        if not isinstance(model, MiniMaxH3VideoVAE):
            raise TypeError(f"MiniMaxH3VideoVaePatcher: expected a MiniMaxH3VideoVAE, got {type(model).__name__}")
        VaePatcher.__init__(self, model, load, offload_device, cache_patched_weights=cache_patched_weights)

    @property
    def downscale_ratio(self) -> Any:  # type: ignore[override]
        return (_frames_to_latents, 16, 16)

    @property
    def upscale_ratio(self) -> Any:  # type: ignore[override]
        return (_latents_to_frames, 16, 16)

    def temporal_compression_decode(self) -> int | None:
        """As ComfyUI computes it from the frames map: round(map(8192) / 8192) = 3."""
        return round(_latents_to_frames(8192) / 8192)

    @staticmethod
    def process_output(image: torch.Tensor) -> torch.Tensor:
        return image  # the VAE returns 0..1 pixels

    def memory_used_encode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        """ComfyUI's estimate for this VAE, pixels [B, C, T, H, W] (or frames [T, H, W, C])."""
        frames, height, width = (shape[2], shape[3], shape[4]) if len(shape) == 5 and shape[1] <= 4 else \
            (shape[-4], shape[-3], shape[-2])
        fixed, per_pixel = (110_000_000, 7) if frames == 1 else (1_300_000_000, 9.5)
        frames = min(frames, self.model.config.clip_length)
        return int((per_pixel * frames * height * width + fixed) * torch.empty((), dtype=dtype).element_size() * 1.03)

    def memory_used_decode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        frames, height, width = _latents_to_frames(shape[2]), shape[3] * 16, shape[4] * 16
        fixed = 110_000_000 if frames <= 22 else 270_000_000
        model = self.model
        frames = min(frames, (model.chunk + model.chunk_overlap) * model.temporal_ratio + 2)
        return int((9.5 * frames * height * width + fixed) * torch.empty((), dtype=dtype).element_size() * 1.03)

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Frames [T, H, W, C] (or videos [B, T, H, W, C]) in 0..1 -> latents [B, 24, T', H/16, W/16]
        (float32); as ComfyUI, the middle axes are cropped (centred) to multiples of 16 and extra
        channels dropped."""
        if pixels.ndim not in (4, 5):
            raise MiniMaxH3VideoVAEError(f"MiniMax H3 video VAE encode: expected frames [T, H, W, C] or videos "
                                         f"[B, T, H, W, C], got {tuple(pixels.shape)}")
        for axis in range(1, pixels.ndim - 1):
            size = pixels.shape[axis]
            keep = size // 16 * 16
            if keep != size:
                pixels = pixels.narrow(axis, (size % 16) // 2, keep)
        pixels = pixels[..., :3].movedim(-1, 1)
        if pixels.ndim == 4:  # frames: one video
            pixels = pixels.movedim(1, 0).unsqueeze(0)
        with torch.no_grad(), self.applied() as vae:
            x = self.process_input(pixels).to(self.load_device, self.vae_dtype)
            return vae.encode(x).float().to(self.offload_device)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Latents [B, 24, T', h, w] -> videos [B, T, 16h, 16w, 3] in 0..1 (float32)."""
        with torch.no_grad(), self.applied() as vae:
            out = vae.decode(latent.to(self.load_device, self.vae_dtype))
        return out.float().to(self.offload_device).movedim(1, -1)

    def decode_tiled(self, samples: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        return self.decode(samples)

    def encode_tiled(self, pixels: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        return self.encode(pixels)


STATE_DICT_KINDS.append((is_minimax_h3_video_vae, MiniMaxH3VideoVaePatcher))
