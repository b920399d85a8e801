"""The UNet's spatial transformer in the LDM layout: cross-attention blocks over image tokens.

Rombach et al. 2022 ("High-Resolution Image Synthesis with Latent Diffusion Models", sec. 3.3)
after Vaswani et al. 2017; GEGLU feed-forward from Shazeer 2020 ("GLU Variants Improve
Transformer"). Parameter names follow `ldm/modules/attention.py` (`attn1/attn2.to_q/to_k/to_v/
to_out.0`, `ff.net.0.proj`, `ff.net.2`, `norm1..3`, `proj_in/proj_out` as 1x1 convolutions for
SD1 and as linear layers for SD2/SDXL).

Every attention call goes through `comfy_core.attention.attention`, so the backend chosen by the
model's patcher applies. ComfyUI's block patches are honoured from `transformer_options`
(`patches["attn1_patch"|"attn2_patch"|"attn1_output_patch"|"attn2_output_patch"|"middle_patch"]`
and `patches_replace["attn1"|"attn2"][(block_name, block_number[, block_index])]`, where
`block_index` is the block's index inside its SpatialTransformer), with the same call signatures
and the same arguments as in ComfyUI's `BasicTransformerBlock` (a replacement gets projected q, k,
v), so node packs that patch attention work unchanged.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import attention


class CrossAttention(nn.Module):
    """Multi-head attention; `context` defaults to `x` (self-attention)."""

    def __init__(self, query_dim: int, context_dim: int | None, heads: int, dim_head: int) -> None:
        super().__init__()
        inner = heads * dim_head
        context_dim = query_dim if context_dim is None else context_dim
        self.heads = heads
        self.dim_head = dim_head
        self.to_q = nn.Linear(query_dim, inner, bias=False)
        self.to_k = nn.Linear(context_dim, inner, bias=False)
        self.to_v = nn.Linear(context_dim, inner, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner, query_dim), nn.Dropout(0.0))

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None,
                value: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        # x [B, N, C]; context [B, M, Cc]
        context = x if context is None else context
        value = context if value is None else value
        q = self.to_q(x)  # [B, N, inner]
        k = self.to_k(context)  # [B, M, inner]
        v = self.to_v(value)
        return self.to_out(attention(q, k, v, self.heads, mask=mask))  # [B, N, C]


class GEGLU(nn.Module):
    def __init__(self, dim_in: int, dim_out: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out * 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, gate = self.proj(x).chunk(2, dim=-1)
        return x * F.gelu(gate)


class FeedForward(nn.Module):
    def __init__(self, dim: int, mult: int = 4) -> None:
        super().__init__()
        inner = dim * mult
        self.net = nn.Sequential(GEGLU(dim, inner), nn.Dropout(0.0), nn.Linear(inner, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _replacement(patches_replace: dict, kind: str, extra: dict[str, Any]) -> Any:
    """The `patches_replace[kind]` function for this block: keyed `(block_name, block_number,
    block_index)` first, then `(block_name, block_number)`, as ComfyUI's BasicTransformerBlock."""
    table = patches_replace.get(kind)
    if not table:
        return None
    block = extra.get("block")
    if block is None:
        return None
    key = (block[0], block[1], extra.get("block_index", 0))
    if key in table:
        return table[key]
    return table.get(tuple(block))


def _patched_attention(kind: str, attn: CrossAttention, n: torch.Tensor, context: torch.Tensor | None,
                       extra: dict[str, Any], patches: dict, replace: dict) -> torch.Tensor:
    """One attention sub-block (`kind` "attn1" or "attn2") with ComfyUI's patch points, in
    ComfyUI's order: `{kind}_patch`es may change the normed input, context and value;
    a `patches_replace[kind]` function receives the PROJECTED q, k, v (`to_q/to_k/to_v` applied)
    and its result goes through `to_out`; `{kind}_output_patch`es post-process the result.
    `context` is None for self-attention (attn1)."""
    value = None
    kind_patches = patches.get(f"{kind}_patch", ())
    if kind_patches:
        if context is None:
            context = n
        value = context
        for patch in kind_patches:
            n, context, value = patch(n, context, value, extra)
    fn = _replacement(replace, kind, extra)
    if fn is not None:
        if context is None:
            context = n
        if value is None:
            value = context
        n = attn.to_out(fn(attn.to_q(n), attn.to_k(context), attn.to_v(value), extra))
    else:
        n = attn(n, context, value)
    for patch in patches.get(f"{kind}_output_patch", ()):
        n = patch(n, extra)
    return n


class BasicTransformerBlock(nn.Module):
    """Pre-norm self-attention, cross-attention and GEGLU feed-forward, each residual."""

    def __init__(self, dim: int, heads: int, dim_head: int, context_dim: int) -> None:
        super().__init__()
        self.attn1 = CrossAttention(dim, None, heads, dim_head)
        self.ff = FeedForward(dim)
        self.attn2 = CrossAttention(dim, context_dim, heads, dim_head)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.norm3 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        # x [B, N, C], context [B, M, Cc]
        if not transformer_options:
            x = self.attn1(self.norm1(x)) + x
            x = self.attn2(self.norm2(x), context) + x
            return self.ff(self.norm3(x)) + x
        return self._forward_patched(x, context, transformer_options)

    def _forward_patched(self, x: torch.Tensor, context: torch.Tensor | None,
                         transformer_options: dict[str, Any]) -> torch.Tensor:
        """The same computation with ComfyUI's patch points (see the module docstring), plus
        `middle_patch` between the self-attention residual and the cross-attention."""
        patches = transformer_options.get("patches", {})
        replace = transformer_options.get("patches_replace", {})
        extra = {k: v for k, v in transformer_options.items() if k not in ("patches", "patches_replace")}
        extra["n_heads"] = self.attn1.heads
        extra["dim_head"] = self.attn1.dim_head
        extra["attn_precision"] = None

        x = x + _patched_attention("attn1", self.attn1, self.norm1(x), None, extra, patches, replace)
        for patch in patches.get("middle_patch", ()):
            x = patch(x, extra)
        x = x + _patched_attention("attn2", self.attn2, self.norm2(x), context, extra, patches, replace)
        return self.ff(self.norm3(x)) + x


class SpatialTransformer(nn.Module):
    """Image tokens through `depth` transformer blocks, with a residual around the whole stack."""

    def __init__(self, channels: int, heads: int, dim_head: int, depth: int, context_dim: int,
                 use_linear: bool) -> None:
        super().__init__()
        inner = heads * dim_head
        self.use_linear = use_linear
        # eps 1e-6 here (LDM's `Normalize`), unlike the ResBlocks' 1e-5.
        self.norm = nn.GroupNorm(32, channels, eps=1e-6)
        self.proj_in = nn.Linear(channels, inner) if use_linear else nn.Conv2d(channels, inner, 1)
        self.transformer_blocks = nn.ModuleList(
            BasicTransformerBlock(inner, heads, dim_head, context_dim) for _ in range(depth))
        self.proj_out = nn.Linear(inner, channels) if use_linear else nn.Conv2d(inner, channels, 1)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        b, c, h, w = x.shape
        x_in = x
        x = self.norm(x)
        if not self.use_linear:
            x = self.proj_in(x)  # [B, inner, H, W]
        # Contiguous token and image layouts, as ComfyUI's SpatialTransformer makes them: a transposed
        # view would reach proj_out as a channels-last image (and proj_in / the blocks as a strided
        # matrix), where oneDNN/MKL pick other kernels that round differently; adaptive samplers
        # (dpm_adaptive) turn those last-bit differences into other step sequences.
        x = x.flatten(2).transpose(1, 2).contiguous()  # [B, H*W, inner or C]
        if self.use_linear:
            x = self.proj_in(x)
        if transformer_options:
            # ComfyUI's SpatialTransformer writes these into the UNet's options dict in place.
            transformer_options["activations_shape"] = [b, c, h, w]
        for i, block in enumerate(self.transformer_blocks):
            if transformer_options:
                transformer_options["block_index"] = i
            x = block(x, context, transformer_options)
        if self.use_linear:
            x = self.proj_out(x)
        x = x.transpose(1, 2).reshape(b, -1, h, w).contiguous()  # [B, inner or C, H, W]
        if not self.use_linear:
            x = self.proj_out(x)
        return x + x_in
