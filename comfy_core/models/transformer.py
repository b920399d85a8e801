"""The UNet's spatial transformer in the LDM layout: cross-attention blocks over image tokens.

Rombach et al. 2022 ("High-Resolution Image Synthesis with Latent Diffusion Models", sec. 3.3)
after Vaswani et al. 2017; GEGLU feed-forward from Shazeer 2020 ("GLU Variants Improve
Transformer"). Parameter names follow `ldm/modules/attention.py` (`attn1/attn2.to_q/to_k/to_v/
to_out.0`, `ff.net.0.proj`, `ff.net.2`, `norm1..3`, `proj_in/proj_out` as 1x1 convolutions for
SD1 and as linear layers for SD2/SDXL); constructors take ComfyUI's arguments (including
`dtype`, `device`, `operations`, see `unet_blocks`).

Attention goes through `comfy_core.attention.calling.attend` / `attend_masked` (ComfyUI's
`optimized_attention` calling convention): the replacement named by the `ExtensionPoints` in
force (a node pack assigning `comfy.ldm.modules.attention.optimized_attention`, through compat),
else the backend the model's patcher chose; no module global is read. ComfyUI's
block patches are honoured from `transformer_options` (`patches["attn1_patch"|"attn2_patch"|
"attn1_output_patch"|"attn2_output_patch"|"middle_patch"]` and `patches_replace["attn1"|"attn2"]
[(block_name, block_number[, block_index])]`, `block_index` being the block's index inside its
SpatialTransformer), with the call signatures and arguments of ComfyUI's `BasicTransformerBlock`
(a replacement gets projected q, k, v), so node packs that patch attention work unchanged.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.attention.calling import attention_pytorch, attention_sub_quad
from comfy_core.models.unet_blocks import operations_or_default


def exists(value: Any) -> bool:
    return value is not None


def default(value: Any, fallback: Any) -> Any:
    """`value`, or `fallback` when `value` is None (ComfyUI's attention.py `default`: the
    fallback is returned as is, never called)."""
    return value if value is not None else fallback


def optimized_attention_for_device(device: Any, mask: bool = False, small_input: bool = False) -> Callable[..., torch.Tensor]:
    """ComfyUI's choice of attention function for encoders (CLIP, CLIP vision): sdpa for small
    inputs, sub-quadratic on the CPU, else `optimized_attention` (`_masked`) as it is in this
    context (the extension points' replacement, or the patcher's backend)."""
    if small_input:
        return attention_pytorch
    if torch.device(device) == torch.device("cpu"):
        return attention_sub_quad
    return calling.attention_function(masked=mask)


class CrossAttention(nn.Module):
    """Multi-head attention; `context` defaults to `x` (self-attention)."""

    def __init__(self, query_dim: int, context_dim: int | None = None, heads: int = 8, dim_head: int = 64,
                 dropout: float = 0.0, attn_precision: Any = None, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        inner = heads * dim_head
        context_dim = query_dim if context_dim is None else context_dim
        self.attn_precision = attn_precision
        self.heads = heads
        self.dim_head = dim_head
        factory = {"dtype": dtype, "device": device}
        self.to_q = ops.Linear(query_dim, inner, bias=False, **factory)
        self.to_k = ops.Linear(context_dim, inner, bias=False, **factory)
        self.to_v = ops.Linear(context_dim, inner, bias=False, **factory)
        self.to_out = nn.Sequential(ops.Linear(inner, query_dim, **factory), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, value: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        # x [B, N, C]; context [B, M, Cc]
        context = x if context is None else context
        value = context if value is None else value
        q = self.to_q(x)  # [B, N, inner]
        k = self.to_k(context)  # [B, M, inner]
        v = self.to_v(value)
        options = {} if transformer_options is None else transformer_options
        if mask is None:
            out = calling.attend(q, k, v, self.heads, attn_precision=self.attn_precision,
                                 transformer_options=options)
        else:
            out = calling.attend_masked(q, k, v, self.heads, mask, attn_precision=self.attn_precision,
                                        transformer_options=options)
        return self.to_out(out)  # [B, N, C]


class GEGLU(nn.Module):
    def __init__(self, dim_in: int, dim_out: int, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        self.proj = operations_or_default(operations).Linear(dim_in, dim_out * 2, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, gate = self.proj(x).chunk(2, dim=-1)
        return x * F.gelu(gate)


class FeedForward(nn.Module):
    """`Linear(dim, mult*dim) -> GELU` (or a GEGLU with `glu`), dropout, `Linear(-> dim_out)`."""

    def __init__(self, dim: int, dim_out: int | None = None, mult: int = 4, glu: bool = False, dropout: float = 0.0,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        inner = int(dim * mult)
        dim_out = dim if dim_out is None else dim_out
        factory = {"dtype": dtype, "device": device}
        project_in: nn.Module = (GEGLU(dim, inner, operations=ops, **factory) if glu
                                 else nn.Sequential(ops.Linear(dim, inner, **factory), nn.GELU()))
        self.net = nn.Sequential(project_in, nn.Dropout(dropout), ops.Linear(inner, dim_out, **factory))

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
                       extra: dict[str, Any], patches: dict, replace: dict,
                       transformer_options: dict[str, Any]) -> torch.Tensor:
    """One attention sub-block (`kind` "attn1" or "attn2") with ComfyUI's patch points, in
    ComfyUI's order: `{kind}_patch`es may change the normed input, context and value;
    a `patches_replace[kind]` function receives the PROJECTED q, k, v (`to_q/to_k/to_v` applied)
    and its result goes through `to_out`; `{kind}_output_patch`es post-process the result.
    `context` is None for self-attention."""
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
        n = attn(n, context, value, transformer_options=transformer_options)
    for patch in patches.get(f"{kind}_output_patch", ()):
        n = patch(n, extra)
    return n


class BasicTransformerBlock(nn.Module):
    """Pre-norm self-attention, cross-attention and feed-forward, each residual.

    ComfyUI's options: `gated_ff` (GEGLU feed-forward, the SD default), `ff_in`/`inner_dim` (a
    first feed-forward into `inner_dim`, SVD's temporal blocks), `disable_self_attn` (attn1
    attends to the context), `disable_temporal_crossattention` (no attn2),
    `switch_temporal_ca_to_sa` (attn2 attends to its own input)."""

    def __init__(self, dim: int, n_heads: int, d_head: int, dropout: float = 0.0, context_dim: int | None = None,
                 gated_ff: bool = True, checkpoint: bool = True, ff_in: bool = False, inner_dim: int | None = None,
                 disable_self_attn: bool = False, disable_temporal_crossattention: bool = False,
                 switch_temporal_ca_to_sa: bool = False, attn_precision: Any = None, dtype: Any = None,
                 device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device, "operations": ops}
        norm = {"dtype": dtype, "device": device}
        self.ff_in: Any = ff_in or inner_dim is not None
        inner_dim = dim if inner_dim is None else inner_dim
        self.is_res = inner_dim == dim
        self.attn_precision = attn_precision
        if self.ff_in:
            self.norm_in = ops.LayerNorm(dim, **norm)
            self.ff_in = FeedForward(dim, dim_out=inner_dim, dropout=dropout, glu=gated_ff, **factory)
        self.disable_self_attn = disable_self_attn
        self.attn1 = CrossAttention(inner_dim, context_dim if disable_self_attn else None, n_heads, d_head, dropout,
                                    attn_precision, **factory)
        self.ff = FeedForward(inner_dim, dim_out=dim, dropout=dropout, glu=gated_ff, **factory)
        if disable_temporal_crossattention:
            if switch_temporal_ca_to_sa:
                raise ValueError("BasicTransformerBlock: switch_temporal_ca_to_sa needs the cross-attention "
                                 "that disable_temporal_crossattention removes")
            self.attn2: CrossAttention | None = None
        else:
            self.attn2 = CrossAttention(inner_dim, None if switch_temporal_ca_to_sa else context_dim, n_heads, d_head,
                                        dropout, attn_precision, **factory)
            self.norm2 = ops.LayerNorm(inner_dim, **norm)
        self.norm1 = ops.LayerNorm(inner_dim, **norm)
        self.norm3 = ops.LayerNorm(inner_dim, **norm)
        self.n_heads = n_heads
        self.d_head = d_head
        self.switch_temporal_ca_to_sa = switch_temporal_ca_to_sa

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        # x [B, N, C], context [B, M, Cc]
        options = {} if transformer_options is None else transformer_options
        patches = options.get("patches", {})
        replace = options.get("patches_replace", {})
        extra = {k: v for k, v in options.items() if k not in ("patches", "patches_replace")}
        extra["n_heads"] = self.n_heads
        extra["dim_head"] = self.d_head
        extra["attn_precision"] = self.attn_precision

        if self.ff_in:
            x_ff = self.ff_in(self.norm_in(x))
            x = x_ff + x if self.is_res else x_ff
        context_attn1 = context if self.disable_self_attn else None
        x = _patched_attention("attn1", self.attn1, self.norm1(x), context_attn1, extra, patches, replace,
                               options) + x
        for patch in patches.get("middle_patch", ()):
            x = patch(x, extra)
        if self.attn2 is not None:
            n = self.norm2(x)
            context_attn2 = n if self.switch_temporal_ca_to_sa else context
            # attn2 with no context in the table is cross-attention to itself, as ComfyUI's
            # CrossAttention defaults its context to its input.
            x = _patched_attention("attn2", self.attn2, n, context_attn2, extra, patches, replace, options) + x
        out = self.ff(self.norm3(x))
        return out + x if self.is_res else out


class SpatialTransformer(nn.Module):
    """Image tokens through `depth` transformer blocks, with a residual around the whole stack.
    `context_dim` may be a list (one per block), and so may the `context` given to forward."""

    def __init__(self, in_channels: int, n_heads: int, d_head: int, depth: int = 1, dropout: float = 0.0,
                 context_dim: int | list[int] | None = None, disable_self_attn: bool = False,
                 use_linear: bool = False, use_checkpoint: bool = True, attn_precision: Any = None,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        if not isinstance(context_dim, (list, tuple)):
            context_dim = [context_dim] * depth
        self.in_channels = in_channels
        inner = n_heads * d_head
        self.use_linear = use_linear
        factory = {"dtype": dtype, "device": device}
        # eps 1e-6 here (LDM's `Normalize`), unlike the ResBlocks' 1e-5.
        self.norm = ops.GroupNorm(32, in_channels, eps=1e-6, affine=True, **factory)
        self.proj_in = (ops.Linear(in_channels, inner, **factory) if use_linear
                        else ops.Conv2d(in_channels, inner, 1, **factory))
        self.transformer_blocks = nn.ModuleList(
            BasicTransformerBlock(inner, n_heads, d_head, dropout=dropout, context_dim=context_dim[d],
                                  disable_self_attn=disable_self_attn, checkpoint=use_checkpoint,
                                  attn_precision=attn_precision, operations=ops, **factory)
            for d in range(depth))
        self.proj_out = (ops.Linear(inner, in_channels, **factory) if use_linear
                         else ops.Conv2d(inner, in_channels, 1, **factory))

    def forward(self, x: torch.Tensor, context: torch.Tensor | list | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        contexts = context if isinstance(context, list) else [context] * len(self.transformer_blocks)
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
        if transformer_options is not None:
            # ComfyUI's SpatialTransformer writes these into the UNet's options dict in place.
            transformer_options["activations_shape"] = [b, c, h, w]
        for i, block in enumerate(self.transformer_blocks):
            if transformer_options is not None:
                transformer_options["block_index"] = i
            x = block(x, contexts[i], transformer_options)
        if self.use_linear:
            x = self.proj_out(x)
        x = x.transpose(1, 2).reshape(b, -1, h, w).contiguous()  # [B, inner or C, H, W]
        if not self.use_linear:
            x = self.proj_out(x)
        return x + x_in
