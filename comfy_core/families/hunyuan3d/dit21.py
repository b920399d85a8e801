"""Hunyuan3D 2.1's shape DiT (`Hunyuan3Dv21DiT`) and `Hunyuan3D21DiTConfig` read from weights.

Tencent's Hunyuan3D 2.1 (`hy3dshape/models/denoisers/hunyuandit.py`, `HunYuanDiTPlain`), as
ComfyUI runs it (`comfy/ldm/hunyuan3dv2_1/hunyuandit.py`, state-dict names the same); written
here:

- the latent `[B, 64, N]` as tokens through `x_embedder`; the time input `1 - t` through a
  sinusoidal embedding of the width (sin half first, period 10000) and `t_embedder.mlp`
  (Linear 4x, GELU, Linear), prepended to the tokens as one extra token;
- `depth` blocks (a U-ViT: blocks past the middle take the output of their mirror block before
  the middle, `skip_linear` over `[skip, x]` then `skip_norm`): LayerNorm -> self-attention,
  LayerNorm -> cross-attention to the image tokens, LayerNorm -> MLP (4x, GELU) or, for the last
  blocks, a mixture of experts (softmax gate, the top 2 of `num_experts` weighted by their gate
  scores, unnormalised, plus a shared expert); q/k RMS norms per head (eps 1e-6);
- the release's head split: queries, keys and values are concatenated and cut per head, so head
  `h` reads `[q | k | v][..., 3 d h : 3 d (h+1)]` as its (query, key, value) (self-attention) and
  `[k | v][..., 2 d h : 2 d (h+1)]` as its (key, value) (cross-attention); kept as trained;
- final LayerNorm, the time token dropped, `final_layer.linear`, the output negated.

ComfyUI's batch swap is kept: the context's two halves (negative, positive in its batch order)
are exchanged before the blocks and the output's halves after them. An odd batch (one
conditioning) is run without the swap (ComfyUI's split into two halves fails there).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.families.hunyuan3d.dit import Hunyuan3DConfigError
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, numbered_children, shape_reader

NUM_HEADS = 16  # ComfyUI's detection
EPS = 1e-6
TOP_K = 2


@dataclass(frozen=True)
class Hunyuan3D21DiTConfig:
    """What the network's constructor takes (ComfyUI's `HunYuanDiTPlain` arguments), with the
    blocks that hold a mixture of experts read from the weights."""

    in_channels: int = 64
    hidden_size: int = 2048
    context_dim: int = 1024
    depth: int = 21
    num_heads: int = NUM_HEADS
    qkv_bias: bool = False
    num_experts: int = 8
    moe_blocks: tuple[int, ...] = (15, 16, 17, 18, 19, 20)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Hunyuan3D21DiTConfig":
        shape = shape_reader(tensors, prefix, Hunyuan3DConfigError, "Hunyuan3D 2.1 DiT")
        hidden, in_channels = shape("x_embedder.weight")
        depth = count_numbered(tensors, prefix, "blocks", Hunyuan3DConfigError, "Hunyuan3D 2.1 DiT")
        if depth == 0:
            raise Hunyuan3DConfigError("Hunyuan3D 2.1 DiT: no blocks")
        context = shape("blocks.0.attn2.to_k.weight")[1]
        moe = tuple(i for i in range(depth) if f"{prefix}blocks.{i}.moe.gate.weight" in tensors)
        experts = 0
        if moe:
            experts = shape(f"blocks.{moe[0]}.moe.gate.weight")[0]
            found = len(numbered_children(tensors, f"{prefix}blocks.{moe[0]}.moe.experts."))
            if found != experts:
                raise Hunyuan3DConfigError(f"Hunyuan3D 2.1 DiT: the gate routes to {experts} experts, "
                                           f"the file holds {found}")
        if hidden % NUM_HEADS:
            raise Hunyuan3DConfigError(f"Hunyuan3D 2.1 DiT: width {hidden} is not divisible by {NUM_HEADS} heads")
        return cls(in_channels=int(in_channels), hidden_size=int(hidden), context_dim=int(context), depth=depth,
                   qkv_bias=prefix + "blocks.0.attn1.to_q.bias" in tensors, num_experts=int(experts or 8),
                   moe_blocks=moe)

    def comfy_unet_config(self) -> dict[str, Any]:
        return {"image_model": "hunyuan3d2_1", "in_channels": self.in_channels, "context_dim": self.context_dim,
                "hidden_size": self.hidden_size, "mlp_ratio": 4.0, "num_heads": self.num_heads, "depth": self.depth,
                "qkv_bias": self.qkv_bias, "guidance_cond_proj_dim": None}


def _time_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """[B] -> [B, dim]: sin half first, frequencies `exp(-ln(max_period) i / half)` (diffusers'
    `Timesteps` with no shift), float32."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    emb = torch.cat([args.sin(), args.cos()], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


class _RMSNorm(nn.Module):
    def __init__(self, dim: int, **factory: Any) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight.to(x.dtype), EPS)


class _TimestepEmbedder(nn.Module):
    def __init__(self, width: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.width = width
        self.mlp = nn.Sequential(ops.Linear(width, 4 * width, bias=True, **factory), nn.GELU(),
                                 ops.Linear(4 * width, width, bias=True, **factory))

    def forward(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.mlp(_time_embedding(t, self.width).to(dtype)).unsqueeze(1)  # [B, 1, W]


class _SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, bias: bool, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = heads
        self.to_q = ops.Linear(width, width, bias=bias, **factory)
        self.to_k = ops.Linear(width, width, bias=bias, **factory)
        self.to_v = ops.Linear(width, width, bias=bias, **factory)
        self.q_norm = _RMSNorm(width // heads, **factory)
        self.k_norm = _RMSNorm(width // heads, **factory)
        self.out_proj = ops.Linear(width, width, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, width = x.shape
        d = width // self.heads
        packed = torch.cat((self.to_q(x), self.to_k(x), self.to_v(x)), dim=-1).view(b, n, self.heads, 3, d)
        q, k, v = packed.unbind(3)  # each [B, N, H, d] (the release's per-head cut)
        q, k = self.q_norm(q), self.k_norm(k)
        out = calling.attend(q.reshape(b, n, width), k.reshape(b, n, width), v.reshape(b, n, width), self.heads)
        return self.out_proj(out)


class _CrossAttention(nn.Module):
    def __init__(self, width: int, context: int, heads: int, bias: bool, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = heads
        self.to_q = ops.Linear(width, width, bias=bias, **factory)
        self.to_k = ops.Linear(context, width, bias=bias, **factory)
        self.to_v = ops.Linear(context, width, bias=bias, **factory)
        self.q_norm = _RMSNorm(width // heads, **factory)
        self.k_norm = _RMSNorm(width // heads, **factory)
        self.out_proj = ops.Linear(width, width, bias=True, **factory)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        b, n, width = x.shape
        m = y.shape[1]
        d = width // self.heads
        y = y.to(self.to_k.weight.dtype)
        q = self.to_q(x).view(b, n, self.heads, d)
        k, v = torch.cat((self.to_k(y), self.to_v(y)), dim=-1).view(b, m, self.heads, 2, d).unbind(3)
        q, k = self.q_norm(q), self.k_norm(k)
        out = calling.attend(q.reshape(b, n, width), k.reshape(b, m, width), v.reshape(b, m, width), self.heads)
        return self.out_proj(out)


class _FeedForward(nn.Module):
    """`net.0.proj` (GELU after it), `net.2` (the released names; `net.1` is a dropout)."""

    def __init__(self, width: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.net = nn.ModuleList([_GeluProj(width, 4 * width, ops, factory), nn.Dropout(0.0),
                                  ops.Linear(4 * width, width, **factory)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net[2](self.net[0](x))


class _GeluProj(nn.Module):
    def __init__(self, dim_in: int, dim_out: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.proj = ops.Linear(dim_in, dim_out, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x))


class _Gate(nn.Module):
    def __init__(self, width: int, experts: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(experts, width, **factory))


class _MixtureOfExperts(nn.Module):
    """Top-2 routing by softmax gate scores (not renormalised) plus a shared expert (DeepSeekMoE's
    form, Dai et al. 2024, as Hunyuan3D 2.1 trains it)."""

    def __init__(self, width: int, experts: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.experts = nn.ModuleList([_FeedForward(width, ops, factory) for _ in range(experts)])
        self.gate = _Gate(width, experts, factory)
        self.shared_experts = _FeedForward(width, ops, factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # [T, W]
        scores = F.linear(flat, self.gate.weight.to(flat.dtype)).softmax(dim=-1)  # [T, E]
        weights, chosen = torch.topk(scores, k=TOP_K, dim=-1)  # [T, 2]
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = torch.nonzero(chosen == e, as_tuple=True)
            if token.numel() == 0:
                continue
            out.index_add_(0, token, expert(flat[token]) * weights[token, slot, None])
        return out.view(shape) + self.shared_experts(x)


class _Mlp(nn.Module):
    def __init__(self, width: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.fc1 = ops.Linear(width, 4 * width, **factory)
        self.fc2 = ops.Linear(4 * width, width, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class _Block(nn.Module):
    def __init__(self, config: Hunyuan3D21DiTConfig, index: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        width, heads = config.hidden_size, config.num_heads
        self.norm1 = ops.LayerNorm(width, elementwise_affine=True, eps=EPS, **factory)
        self.attn1 = _SelfAttention(width, heads, config.qkv_bias, ops, factory)
        self.norm2 = ops.LayerNorm(width, elementwise_affine=True, eps=EPS, **factory)
        self.attn2 = _CrossAttention(width, config.context_dim, heads, config.qkv_bias, ops, factory)
        self.norm3 = ops.LayerNorm(width, elementwise_affine=True, eps=EPS, **factory)
        self.skip_linear = None
        if index > config.depth // 2:
            self.skip_norm = ops.LayerNorm(width, elementwise_affine=True, eps=EPS, **factory)
            self.skip_linear = ops.Linear(2 * width, width, **factory)
        if index in config.moe_blocks:
            self.moe = _MixtureOfExperts(width, config.num_experts, ops, factory)
        else:
            self.mlp = _Mlp(width, ops, factory)

    def forward(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor,
                skip_tensor: torch.Tensor | None = None) -> torch.Tensor:
        if self.skip_linear is not None:
            x = self.skip_norm(self.skip_linear(torch.cat([skip_tensor, x], dim=-1)))
        x = x + self.attn1(self.norm1(x))
        x = x + self.attn2(self.norm2(x), context)
        feed = self.moe if hasattr(self, "moe") else self.mlp
        return x + feed(self.norm3(x))


class _FinalLayer(nn.Module):
    def __init__(self, width: int, out_channels: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.norm_final = ops.LayerNorm(width, elementwise_affine=True, eps=EPS, **factory)
        self.linear = ops.Linear(width, out_channels, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm_final(x)[:, 1:])


def _swap_halves(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] % 2:
        return x
    first, second = x.chunk(2, dim=0)
    return torch.cat([second, first], dim=0)


class Hunyuan3Dv21DiT(nn.Module):
    """See the module docstring. `forward(x [B, C, N], t [B], context [B, M, ctx])`; block `i`
    can be replaced through `transformer_options["patches_replace"]["dit"][("block", i)]` with
    ComfyUI's arguments (`{"x", "t", "cond", "skip"}`, `{"original_block": fn}`)."""

    def __init__(self, config: Hunyuan3D21DiTConfig, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.x_embedder = ops.Linear(config.in_channels, config.hidden_size, bias=True, **factory)
        self.t_embedder = _TimestepEmbedder(config.hidden_size, ops, factory)
        self.blocks = nn.ModuleList([_Block(config, i, ops, factory) for i in range(config.depth)])
        self.final_layer = _FinalLayer(config.hidden_size, config.in_channels, ops, factory)

    @classmethod
    def from_config(cls, config: Hunyuan3D21DiTConfig, operations: Any = None) -> "Hunyuan3Dv21DiT":
        return cls(config, operations=operations)

    def forward(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor,
                transformer_options: dict[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        options = transformer_options if transformer_options is not None else {}
        context = _swap_halves(context)
        dtype = self.x_embedder.weight.dtype
        time = self.t_embedder(1.0 - t, dtype)  # [B, 1, W]
        h = torch.cat([time, self.x_embedder(x.movedim(-1, -2).to(dtype))], dim=1)  # [B, 1 + N, W]
        replace = options.get("patches_replace", {}).get("dit", {})
        middle = self.config.depth // 2
        skips: list[torch.Tensor] = []
        for i, block in enumerate(self.blocks):
            skip = skips.pop() if i > middle else None
            if ("block", i) in replace:
                def original(args: dict[str, Any], block: nn.Module = block) -> torch.Tensor:
                    return block(args["x"], args["t"], args["cond"], skip_tensor=args.get("skip"))

                h = replace[("block", i)]({"x": h, "t": time, "cond": context, "skip": skip},
                                          {"original_block": original})
            else:
                h = block(h, time, context, skip_tensor=skip)
            if i < middle:
                skips.append(h)
        out = -self.final_layer(h).movedim(-2, -1)  # [B, C, N]
        return _swap_halves(out)
