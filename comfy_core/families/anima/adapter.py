"""Anima's LLM adapter (circlestone-labs' Anima, as ComfyUI's `comfy/ldm/anima/model.py: LLMAdapter`
runs it; written here): it lets a Qwen3 language model condition a DiT that was trained on T5-XXL
states. The prompt's T5 token ids are embedded (a 32128-row table) as the queries of a small
transformer that cross-attends to the Qwen3 states; its output takes the T5 states' place.

    x = in_proj(embed(t5_ids))                       (in_proj only when the widths differ)
    per block:  x += self_attn(norm_self_attn(x))    (RoPE on q and k at the T5 positions)
                x += cross_attn(norm_cross_attn(x), qwen_states)
                                                     (RoPE: q at the T5 positions, k at the Qwen ones)
                x += mlp(norm_mlp(x))                (Linear + GELU + Linear, with biases)
    out = norm(out_proj(x))

Attention: q/k/v/o projections without biases, RMSNorm (eps 1e-6) per head on q and k before the
rotary embedding (rotate-half, base 10000, over the whole head: `cat(freqs, freqs)`), 16 heads (the
weights cannot show the count: ComfyUI's fixed value), no masks (ComfyUI passes none). The block
norms are RMSNorm (eps 1e-6) unless the file has LayerNorm biases (`layer_norm`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling

ADAPTER_HEADS = 16
ADAPTER_ROPE_THETA = 10000.0


class RMSNorm(nn.Module):
    """RMS normalisation over the last axis with a learned `weight` (eps 1e-6), the weight cast
    to the input's dtype per call (ComfyUI's `operations.RMSNorm`)."""

    def __init__(self, dim: int, eps: float = 1e-6, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight=self.weight.to(dtype=x.dtype, device=x.device), eps=self.eps)


@dataclass(frozen=True)
class LLMAdapterConfig:
    vocab_size: int
    target_dim: int  # the T5 width it stands in for (its output, the DiT's context width)
    model_dim: int
    source_dim: int  # the language model's width
    num_layers: int
    mlp_hidden: int
    num_heads: int = ADAPTER_HEADS
    use_self_attn: bool = True
    layer_norm: bool = False

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str,
                            error: type[Exception] = ValueError) -> "LLMAdapterConfig":
        def shape(key: str) -> tuple[int, ...]:
            try:
                return tuple(tensors[prefix + key].shape)
            except KeyError:
                raise error(f"Anima LLM adapter key {prefix + key!r} is missing") from None

        vocab, target = shape("embed.weight")
        model_dim, source = shape("blocks.0.cross_attn.k_proj.weight")
        mlp_hidden, _ = shape("blocks.0.mlp.0.weight")
        layers = 0
        while f"{prefix}blocks.{layers}.cross_attn.q_proj.weight" in tensors:
            layers += 1
        if model_dim % ADAPTER_HEADS or (model_dim // ADAPTER_HEADS) % 2:
            raise error(f"Anima LLM adapter: width {model_dim} does not split into {ADAPTER_HEADS} heads of an even width")
        return cls(vocab_size=vocab, target_dim=target, model_dim=model_dim, source_dim=source, num_layers=layers,
                   mlp_hidden=mlp_hidden,
                   use_self_attn=prefix + "blocks.0.self_attn.q_proj.weight" in tensors,
                   layer_norm=prefix + "blocks.0.norm_cross_attn.bias" in tensors)


def rotary(positions: int, head_dim: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos / sin `[positions, head_dim]` (the frequencies twice over), computed in float32."""
    inv = 1.0 / ADAPTER_ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    angles = torch.arange(positions, dtype=torch.float32, device=device)[:, None] * inv
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half_apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x `[B, H, S, d]`: `x cos + rotate_half(x) sin` (rotate_half: `(x1, x2) -> (-x2, x1)`)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class AdapterAttention(nn.Module):
    def __init__(self, dim: int, context_dim: int, heads: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.n_heads = heads
        self.head_dim = dim // heads
        self.q_proj = ops.Linear(dim, dim, bias=False, **factory)
        self.q_norm = RMSNorm(self.head_dim, **factory)
        self.k_proj = ops.Linear(context_dim, dim, bias=False, **factory)
        self.k_norm = RMSNorm(self.head_dim, **factory)
        self.v_proj = ops.Linear(context_dim, dim, bias=False, **factory)
        self.o_proj = ops.Linear(dim, dim, bias=False, **factory)

    def forward(self, x: torch.Tensor, context: torch.Tensor, rope_q: tuple[torch.Tensor, torch.Tensor],
                rope_k: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        b, s, _ = x.shape
        n = context.shape[1]
        q = self.q_norm(self.q_proj(x).view(b, s, self.n_heads, self.head_dim)).transpose(1, 2)  # [B, H, S, d]
        k = self.k_norm(self.k_proj(context).view(b, n, self.n_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(context).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        q = rotate_half_apply(q, *rope_q)
        k = rotate_half_apply(k, *rope_k)
        out = calling.attend(q, k, v, self.n_heads, skip_reshape=True)  # [B, S, H*d]
        return self.o_proj(out)


def _norm(dim: int, layer_norm: bool, factory: dict[str, Any], ops: Any) -> nn.Module:
    return ops.LayerNorm(dim, **factory) if layer_norm else RMSNorm(dim, **factory)


class AdapterBlock(nn.Module):
    def __init__(self, config: LLMAdapterConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim = config.model_dim
        self.use_self_attn = config.use_self_attn
        if config.use_self_attn:
            self.norm_self_attn = _norm(dim, config.layer_norm, factory, ops)
            self.self_attn = AdapterAttention(dim, dim, config.num_heads, ops, factory)
        self.norm_cross_attn = _norm(dim, config.layer_norm, factory, ops)
        self.cross_attn = AdapterAttention(dim, config.source_dim, config.num_heads, ops, factory)
        self.norm_mlp = _norm(dim, config.layer_norm, factory, ops)
        hidden = config.mlp_hidden
        self.mlp = nn.Sequential(ops.Linear(dim, hidden, **factory), nn.GELU(), ops.Linear(hidden, dim, **factory))

    def forward(self, x: torch.Tensor, context: torch.Tensor, rope_x: Any, rope_context: Any) -> torch.Tensor:
        if self.use_self_attn:
            normed = self.norm_self_attn(x)
            x = x + self.self_attn(normed, normed, rope_x, rope_x)
        x = x + self.cross_attn(self.norm_cross_attn(x), context, rope_x, rope_context)
        return x + self.mlp(self.norm_mlp(x))


class LLMAdapter(nn.Module):
    """See the module docstring; `forward(source_states [B, N, source_dim], t5_ids [B, M])` ->
    `[B, M, target_dim]`."""

    def __init__(self, config: LLMAdapterConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.config = config
        self.embed = ops.Embedding(config.vocab_size, config.target_dim, **factory)
        self.in_proj = (nn.Identity() if config.model_dim == config.target_dim
                        else ops.Linear(config.target_dim, config.model_dim, **factory))
        self.blocks = nn.ModuleList(AdapterBlock(config, ops, factory) for _ in range(config.num_layers))
        self.out_proj = ops.Linear(config.model_dim, config.target_dim, **factory)
        self.norm = RMSNorm(config.target_dim, **factory)

    def forward(self, source: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        dtype = source.dtype
        weight = self.embed.weight
        x = self.in_proj(F.embedding(ids.to(device=weight.device, dtype=torch.long), weight).to(dtype))
        head_dim = self.config.model_dim // self.config.num_heads
        rope_x = rotary(x.shape[1], head_dim, x.device, dtype)
        rope_context = rotary(source.shape[1], head_dim, x.device, dtype)
        for block in self.blocks:
            x = block(x, source, rope_x, rope_context)
        return self.norm(self.out_proj(x))


__all__ = ["ADAPTER_HEADS", "LLMAdapter", "LLMAdapterConfig", "RMSNorm", "rotary"]
