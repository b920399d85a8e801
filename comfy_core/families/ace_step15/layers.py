"""ACE-Step 1.5's building blocks (ACE Studio / StepFun 2026, "ACE-Step 1.5"), written here from
the published architecture as diffusers' `models/transformers/ace_step_transformer.py` and
`pipelines/ace_step/modeling_ace_step.py` describe it and ComfyUI's `comfy/ldm/ace/ace_step15.py`
runs it (module names are ComfyUI's, the checkpoint's own).

- `Rotary`: Qwen3's rotary embedding (Su et al. 2021, "RoFormer"), rotate-half layout, theta 1e6;
- `AceAttention`: grouped-query attention with per-head RMS norms of q and k (Qwen3's QK-norm);
  RoPE on self-attention only; a self-attention layer may be banded (`sliding_window`: query i sees
  keys j with |i - j| <= window, the DiT's even layers);
- `EncoderLayer`: the pre-norm block of the lyric / timbre encoders, the tokenizer's attention
  pooler and the detokenizer (RMSNorm, attention, RMSNorm, SwiGLU);
- `DiTLayer`: the DiT block: adaLN-single modulation (a learned `scale_shift_table` [1, 6, W] plus
  the timestep projection) of self-attention and the feed-forward, plain cross-attention in between;
- `TimestepEmbedding`: sinusoid of `t * 1000` (cos half first, 256 channels), two linears, and the
  6-way projection of the adaLN parameters.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.families.zimage.nextdit import RMSNorm

ROPE_THETA = 1_000_000.0
RMS_EPS = 1e-6


def rotary_tables(length: int, head_dim: int, device: torch.device,
                  theta: float = ROPE_THETA) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin `[T, head_dim]` of positions 0..T-1, each frequency written twice (both halves)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    angles = torch.outer(torch.arange(length, dtype=torch.float32, device=device), inv)  # [T, d/2]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x `[B, H, T, d]` rotated (rotate-half: the second half negated onto the first)."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + turned * sin.to(x.dtype)


def band_mask(length: int, window: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """`[T, T]` additive mask: 0 where |i - j| <= window, the dtype's lowest value elsewhere."""
    index = torch.arange(length, device=device)
    inside = (index[:, None] - index[None, :]).abs() <= window
    mask = torch.zeros((length, length), device=device, dtype=dtype)
    return mask.masked_fill_(~inside, torch.finfo(dtype).min)


class SwiGLU(nn.Module):
    """`down(silu(gate(x)) * up(x))`, no biases."""

    def __init__(self, width: int, inner: int, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.gate_proj = ops.Linear(width, inner, bias=False, dtype=dtype, device=device)
        self.up_proj = ops.Linear(width, inner, bias=False, dtype=dtype, device=device)
        self.down_proj = ops.Linear(inner, width, bias=False, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class AceAttention(nn.Module):
    """GQA attention with QK-norm (see the module doc). `q_proj` / `k_proj` / `v_proj` / `o_proj`
    without bias, `q_norm` / `k_norm` over one head."""

    def __init__(self, width: int, heads: int, kv_heads: int, head_dim: int, ops: Any, cross: bool = False,
                 sliding_window: int | None = None, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.cross = cross
        self.sliding_window = None if cross else sliding_window
        self.q_proj = ops.Linear(width, heads * head_dim, bias=False, dtype=dtype, device=device)
        self.k_proj = ops.Linear(width, kv_heads * head_dim, bias=False, dtype=dtype, device=device)
        self.v_proj = ops.Linear(width, kv_heads * head_dim, bias=False, dtype=dtype, device=device)
        self.o_proj = ops.Linear(heads * head_dim, width, bias=False, dtype=dtype, device=device)
        self.q_norm = RMSNorm(head_dim, RMS_EPS, dtype=dtype, device=device)
        self.k_norm = RMSNorm(head_dim, RMS_EPS, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None,
                transformer_options: Any = None) -> torch.Tensor:
        """x `[B, T, W]` (queries), context `[B, S, W]` (keys / values of cross-attention) -> `[B, T, W]`."""
        b, t, _ = x.shape
        source = context if self.cross and context is not None else x
        s = source.shape[1]
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim)).transpose(1, 2)  # [B, H, T, d]
        k = self.k_norm(self.k_proj(source).view(b, s, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(source).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)  # [B, kv, S, d]
        if rope is not None and source is x:
            q, k = _rotate(q, *rope), _rotate(k, *rope)
        if self.kv_heads != self.heads:
            repeat = self.heads // self.kv_heads
            k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        mask = None
        if self.sliding_window is not None and source is x:
            mask = band_mask(t, self.sliding_window, x.device, q.dtype)
        out = calling.attend(q, k, v, self.heads, mask=mask, skip_reshape=True,
                             transformer_options=transformer_options or {})  # [B, T, H*d]
        return self.o_proj(out)


class EncoderLayer(nn.Module):
    """Pre-norm block: `x + attn(norm(x))`, then `x + mlp(norm(x))`."""

    def __init__(self, width: int, heads: int, kv_heads: int, head_dim: int, inner: int, ops: Any,
                 sliding_window: int | None = None, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.self_attn = AceAttention(width, heads, kv_heads, head_dim, ops, sliding_window=sliding_window,
                                      dtype=dtype, device=device)
        self.input_layernorm = RMSNorm(width, RMS_EPS, dtype=dtype, device=device)
        self.post_attention_layernorm = RMSNorm(width, RMS_EPS, dtype=dtype, device=device)
        self.mlp = SwiGLU(width, inner, ops, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                transformer_options: Any = None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope=rope, transformer_options=transformer_options)
        return x + self.mlp(self.post_attention_layernorm(x))


class DiTLayer(nn.Module):
    """The DiT block (see the module doc); `temb` is the timestep projection `[B, 6, W]` in the
    order shift, scale, gate (attention), shift, scale, gate (feed-forward)."""

    def __init__(self, width: int, heads: int, kv_heads: int, head_dim: int, inner: int, ops: Any,
                 sliding_window: int | None = None, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.self_attn_norm = RMSNorm(width, RMS_EPS, dtype=dtype, device=device)
        self.self_attn = AceAttention(width, heads, kv_heads, head_dim, ops, sliding_window=sliding_window,
                                      dtype=dtype, device=device)
        self.cross_attn_norm = RMSNorm(width, RMS_EPS, dtype=dtype, device=device)
        self.cross_attn = AceAttention(width, heads, kv_heads, head_dim, ops, cross=True, dtype=dtype, device=device)
        self.mlp_norm = RMSNorm(width, RMS_EPS, dtype=dtype, device=device)
        self.mlp = SwiGLU(width, inner, ops, dtype=dtype, device=device)
        self.scale_shift_table = nn.Parameter(torch.empty(1, 6, width, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor, temb: torch.Tensor, context: torch.Tensor,
                rope: tuple[torch.Tensor, torch.Tensor], transformer_options: Any = None) -> torch.Tensor:
        table = self.scale_shift_table.to(dtype=temb.dtype, device=temb.device) + temb  # [B, 6, W]
        shift, scale, gate, c_shift, c_scale, c_gate = table.chunk(6, dim=1)  # each [B, 1, W]
        h = self.self_attn_norm(x) * (1 + scale) + shift
        x = x + self.self_attn(h, rope=rope, transformer_options=transformer_options) * gate
        x = x + self.cross_attn(self.cross_attn_norm(x), context=context, transformer_options=transformer_options)
        h = self.mlp_norm(x) * (1 + c_scale) + c_shift
        return x + self.mlp(h) * c_gate


def timestep_sinusoid(t: torch.Tensor, channels: int, scale: float = 1000.0) -> torch.Tensor:
    """`[B] -> [B, channels]`: cos then sin of `t * scale` at frequencies `10000^(-i / half)`."""
    half = channels // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    angles = (t.float() * scale)[:, None] * freqs[None]
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


class TimestepEmbedding(nn.Module):
    """`t [B]` -> (`temb [B, W]`, `proj [B, 6, W]`): `linear_2(silu(linear_1(sinusoid)))`, and
    `time_proj(silu(temb))` split in six."""

    channels = 256

    def __init__(self, width: int, ops: Any, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(self.channels, width, bias=True, dtype=dtype, device=device)
        self.linear_2 = ops.Linear(width, width, bias=True, dtype=dtype, device=device)
        self.time_proj = ops.Linear(width, width * 6, bias=True, dtype=dtype, device=device)

    def forward(self, t: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        temb = self.linear_2(F.silu(self.linear_1(timestep_sinusoid(t, self.channels).to(dtype))))
        return temb, self.time_proj(F.silu(temb)).unflatten(1, (6, -1))


__all__ = ["AceAttention", "DiTLayer", "EncoderLayer", "SwiGLU", "TimestepEmbedding", "band_mask",
           "rotary_tables", "timestep_sinusoid"]
