"""Hunyuan3D's ShapeVAE decoder: a latent set `[B, 64, N]` -> occupancy logits on a 3-D grid.

The shape VAE of Hunyuan3D 2.0 / 2.1 (Zhang et al. 2023, "3DShape2VecSet", the latent-set
representation; Hunyuan3D 2.0's `ShapeVAE`), the decoding half ComfyUI runs
(`comfy/ldm/hunyuan3d/vae.py`, state-dict names the same, under `vae.` in the checkpoints);
written here:

- `post_kl` lifts the 64-channel latent tokens to the width, `transformer.resblocks.N` are
  pre-LayerNorm self-attention blocks (eps 1e-6; a fused bias-free `c_qkv` cut per head into
  (q, k, v), LayerNorm q/k norms per head; GELU MLP);
- each query point `p` in `[-bounds, bounds]^3` is Fourier-embedded (`p`, `sin(2^i p)`,
  `cos(2^i p)`, i < 8, 51 features), `geo_decoder.query_proj`-ed, and attends to the latent
  tokens once (`geo_decoder.cross_attn_decoder`: `c_q`, a fused `c_kv` cut per head into (k, v),
  q/k norms; then its MLP), `ln_post` (eps 1e-5) and `output_proj` give one logit;
- the grid is `(resolution + 1)^3` points `linspace(-bounds, bounds)` per axis (x, y, z in that
  nesting), decoded in chunks of points whose size is capped by a memory budget (the result does
  not depend on it: every point is decoded on its own).

The encoder half (point clouds -> latents) is not built: nothing here encodes meshes (ComfyUI
builds it but its `encode` cannot run: it has no `pre_kl`); its tensors in a file are left unread.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.models.weight_shapes import count_numbered, shape_reader

EPS = 1e-6
DEFAULT_HEADS = 16
BOUNDS = 1.01  # ComfyUI's decode default
# Points a chunk may hold: a point's attention scores over the latent set (one row per head, where the
# attention backend materialises them) and its activations (the MLP's 4x width and the residuals) dominate,
# about `(heads x tokens + 6 x width) x 4 bytes` a point; 1 GiB a chunk (ComfyUI's 8000 points of the
# released decoder, 16 heads over 3072 tokens, 1024 wide, take about 1.8 GiB).
CHUNK_BUDGET_BYTES = 2 ** 30


class ShapeVAEConfigError(ValueError):
    """Weights that do not form Hunyuan3D's ShapeVAE decoder."""


@dataclass(frozen=True)
class ShapeVAEConfig:
    embed_dim: int = 64
    width: int = 1024
    heads: int = DEFAULT_HEADS
    decoder_heads: int = DEFAULT_HEADS
    layers: int = 16
    num_freqs: int = 8
    mlp_ratio: int = 4
    decoder_mlp_ratio: int = 4
    qkv_bias: bool = False
    qk_norm: bool = True
    ln_post: bool = True

    # What the loader checks against the family's geometry (latent channels, "down factor").
    @property
    def downscale(self) -> int:
        return 1

    @property
    def latent_channels(self) -> int:
        return self.embed_dim

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "ShapeVAEConfig":
        shape = shape_reader(tensors, prefix, ShapeVAEConfigError, "Hunyuan3D ShapeVAE")
        width, embed_dim = shape("post_kl.weight")
        layers = count_numbered(tensors, prefix, "transformer.resblocks", ShapeVAEConfigError, "Hunyuan3D ShapeVAE")
        qk_norm = prefix + "transformer.resblocks.0.attn.attention.q_norm.weight" in tensors
        heads = width // shape("transformer.resblocks.0.attn.attention.q_norm.weight")[0] if qk_norm and layers \
            else DEFAULT_HEADS
        dec = "geo_decoder.cross_attn_decoder."
        dec_width = shape(dec + "attn.c_q.weight")[0]
        if dec_width != width:
            raise ShapeVAEConfigError(f"Hunyuan3D ShapeVAE: a {dec_width}-wide decoder on a {width}-wide transformer "
                                      "(a downsampling geometry decoder) is not supported")
        dec_norm = prefix + dec + "attn.attention.q_norm.weight" in tensors
        decoder_heads = width // shape(dec + "attn.attention.q_norm.weight")[0] if dec_norm else heads
        features = shape("geo_decoder.query_proj.weight")[1]
        if features % 3 or (features // 3 - 1) % 2:
            raise ShapeVAEConfigError(f"Hunyuan3D ShapeVAE: {features} query features are not 3 x (2 f + 1)")
        mlp = shape("transformer.resblocks.0.mlp.c_fc.weight")[0] // width if layers else 4
        return cls(embed_dim=int(embed_dim), width=int(width), heads=int(heads), decoder_heads=int(decoder_heads),
                   layers=layers, num_freqs=(features // 3 - 1) // 2, mlp_ratio=int(mlp),
                   decoder_mlp_ratio=int(shape(dec + "mlp.c_fc.weight")[0] // width),
                   qkv_bias=prefix + dec + "attn.c_q.bias" in tensors, qk_norm=dec_norm,
                   ln_post=prefix + "geo_decoder.ln_post.weight" in tensors)


def fourier_features(points: torch.Tensor, num_freqs: int) -> torch.Tensor:
    """`[..., 3]` -> `[..., 3 (2 f + 1)]`: the point, then `sin(2^i x_c)` and `cos(2^i x_c)` with the
    frequencies of each coordinate together (c major, i minor), no pi factor."""
    freqs = 2.0 ** torch.arange(num_freqs, dtype=torch.float32, device=points.device)
    scaled = (points[..., None] * freqs.to(points.dtype)).flatten(-2)  # [..., 3 f]
    return torch.cat([points, scaled.sin(), scaled.cos()], dim=-1)


class _Mlp(nn.Module):
    def __init__(self, width: int, ratio: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(width, width * ratio)
        self.c_proj = nn.Linear(width * ratio, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class _HeadNorms(nn.Module):
    def __init__(self, head_dim: int, enabled: bool) -> None:
        super().__init__()
        if enabled:
            self.q_norm = nn.LayerNorm(head_dim, eps=EPS)
            self.k_norm = nn.LayerNorm(head_dim, eps=EPS)

    def norm(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if hasattr(self, "q_norm"):
            return self.q_norm(q), self.k_norm(k)
        return q, k


class _SelfAttention(nn.Module):
    def __init__(self, config: ShapeVAEConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.c_qkv = nn.Linear(config.width, 3 * config.width, bias=config.qkv_bias)
        self.c_proj = nn.Linear(config.width, config.width)
        self.attention = _HeadNorms(config.width // config.heads, config.qk_norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, width = x.shape
        q, k, v = self.c_qkv(x).view(b, n, self.heads, 3, width // self.heads).unbind(3)  # [B, N, H, d]
        q, k = self.attention.norm(q, k)
        out = calling.attend(q.reshape(b, n, width), k.reshape(b, n, width), v.reshape(b, n, width), self.heads)
        return self.c_proj(out)


class _Block(nn.Module):
    def __init__(self, config: ShapeVAEConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.width, eps=EPS)
        self.attn = _SelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.width, eps=EPS)
        self.mlp = _Mlp(config.width, config.mlp_ratio)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class _Transformer(nn.Module):
    def __init__(self, config: ShapeVAEConfig) -> None:
        super().__init__()
        self.resblocks = nn.ModuleList([_Block(config) for _ in range(config.layers)])


class _CrossAttention(nn.Module):
    def __init__(self, config: ShapeVAEConfig) -> None:
        super().__init__()
        self.heads = config.decoder_heads
        self.c_q = nn.Linear(config.width, config.width, bias=config.qkv_bias)
        self.c_kv = nn.Linear(config.width, 2 * config.width, bias=config.qkv_bias)
        self.c_proj = nn.Linear(config.width, config.width)
        self.attention = _HeadNorms(config.width // config.decoder_heads, config.qk_norm)

    def keys_values(self, data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The latent set `[B, M, W]` -> keys, values `[B, M, W]` (normed keys), once per decode."""
        b, m, width = data.shape
        k, v = self.c_kv(data).view(b, m, self.heads, 2, width // self.heads).unbind(3)
        if hasattr(self.attention, "k_norm"):
            k = self.attention.k_norm(k)
        return k.reshape(b, m, width), v.reshape(b, m, width)

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, n, width = x.shape
        q = self.c_q(x).view(b, n, self.heads, width // self.heads)
        if hasattr(self.attention, "q_norm"):
            q = self.attention.q_norm(q)
        return self.c_proj(calling.attend(q.reshape(b, n, width), k, v, self.heads))


class _CrossBlock(nn.Module):
    def __init__(self, config: ShapeVAEConfig) -> None:
        super().__init__()
        self.attn = _CrossAttention(config)
        self.ln_1 = nn.LayerNorm(config.width, eps=EPS)
        self.ln_2 = nn.LayerNorm(config.width, eps=EPS)
        self.ln_3 = nn.LayerNorm(config.width, eps=EPS)
        self.mlp = _Mlp(config.width, config.decoder_mlp_ratio)


class _GeoDecoder(nn.Module):
    def __init__(self, config: ShapeVAEConfig) -> None:
        super().__init__()
        self.query_proj = nn.Linear(3 * (2 * config.num_freqs + 1), config.width)
        self.cross_attn_decoder = _CrossBlock(config)
        if config.ln_post:
            self.ln_post = nn.LayerNorm(config.width)  # torch's default eps (1e-5), as released
        self.output_proj = nn.Linear(config.width, 1)


class ShapeVAE(nn.Module):
    """The decoder; `decode(latent [B, 64, N], num_chunks, octree_resolution, bounds)` ->
    logits `[B, R+1, R+1, R+1]` indexed (x, y, z)."""

    def __init__(self, config: ShapeVAEConfig) -> None:
        super().__init__()
        self.config = config
        self.post_kl = nn.Linear(config.embed_dim, config.width)
        self.transformer = _Transformer(config)
        self.geo_decoder = _GeoDecoder(config)

    @property
    def latent_channels(self) -> int:
        return self.config.embed_dim

    def latent_set(self, latent: torch.Tensor) -> torch.Tensor:
        """`[B, C, N]` -> the decoded latent set `[B, N, W]`."""
        x = self.post_kl(latent.movedim(-2, -1))
        for block in self.transformer.resblocks:
            x = block(x)
        return x

    def query(self, points: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Points `[B, P, 3]` against the latent set's keys / values -> logits `[B, P]`."""
        geo = self.geo_decoder
        block = geo.cross_attn_decoder
        x = geo.query_proj(fourier_features(points, self.config.num_freqs))
        x = x + block.attn(block.ln_1(x), k, v)
        x = x + block.mlp(block.ln_3(x))
        if self.config.ln_post:
            x = geo.ln_post(x)
        return geo.output_proj(x)[..., 0]

    def chunk_points(self, requested: int, tokens: int) -> int:
        """Points a chunk decodes: the requested count, capped by `CHUNK_BUDGET_BYTES`."""
        per_point = (self.config.decoder_heads * tokens + 6 * self.config.width) * 4
        return max(1, min(int(requested), CHUNK_BUDGET_BYTES // per_point))

    def decode(self, latent: torch.Tensor, num_chunks: int = 8000, octree_resolution: int = 256,
               bounds: float = BOUNDS) -> torch.Tensor:
        dtype = self.post_kl.weight.dtype
        latents = self.latent_set(latent.to(dtype))  # [B, N, W]
        block = self.geo_decoder.cross_attn_decoder
        k, v = block.attn.keys_values(block.ln_2(latents))
        side = int(octree_resolution) + 1
        axis = torch.linspace(-bounds, bounds, side, dtype=torch.float32)
        grid = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), dim=-1).reshape(-1, 3)
        grid = grid.to(latents.device, dtype)  # [P, 3], x slowest
        step = self.chunk_points(num_chunks, latents.shape[1])
        out = []
        for start in range(0, grid.shape[0], step):
            points = grid[start:start + step].unsqueeze(0).expand(latents.shape[0], -1, -1)
            out.append(self.query(points, k, v))
        return torch.cat(out, dim=1).view(latents.shape[0], side, side, side).float()


def is_shape_vae(names: Any) -> bool:
    """ComfyUI's test for this VAE in a state dict (`comfy/sd.py`)."""
    return "geo_decoder.cross_attn_decoder.ln_1.bias" in names
