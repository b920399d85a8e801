"""The Wan 2.1 / 2.2 video DiT's building blocks: the sinusoidal time embedding, q/k-RMS-normed
self-attention with 3-D RoPE, text (and CLIP-image) cross-attention, the 6-way modulated block,
the modulated head, the CLIP-vision image projection, VACE's hint blocks and the camera adapter.

Architecture of Alibaba's Wan 2.1 (Wan Team 2025, "Wan: Open and Advanced Large-Scale Video
Generative Models", arXiv 2503.20314; github.com/Wan-Video/Wan2.1 `wan/modules/model.py`), VACE
(Jiang et al. 2025, "VACE: All-in-One Video Creation and Editing", arXiv 2503.07598) and the Fun
camera adapter. Names, constructor and forward arguments are those of ComfyUI's
`comfy/ldm/wan/model.py` (`self_attn.q/k/v/o`, `norm_q/norm_k` over the full width,
`cross_attn.k_img/v_img/norm_k_img`, `norm3` the cross-attention LayerNorm, `ffn.0/2`,
`modulation` `[1, 6, dim]`, `head.head`, `head.modulation` `[1, 2, dim]`, `img_emb.proj.0..4`,
`img_emb.emb_pos`, `before_proj/after_proj`, `control_adapter.conv/residual_blocks`); written here.

Every layer is built from `operations` (default torch's layers) and never initialised: the loader
assigns the weights. Attention runs through `comfy_core.attention.calling.attend`,
looked up at every call (the patcher's backend; a pack's replacement reaches Wan too).
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention.rope import apply_rope1
from comfy_core.attention import calling
from comfy_core.families.wan.causal import cached_keys
from comfy_core.models.unet_blocks import operations_or_default

CLIP_VISION_WIDTH = 1280  # ViT-H/14's width: the penultimate states `img_emb` projects


def sinusoidal_embedding_1d(dim: int, position: torch.Tensor) -> torch.Tensor:
    """`[N] -> [N, dim]` float32, cos half first, frequencies `10000^(-i/half)` (Wan's
    `sinusoidal_embedding_1d`; the timestep is already in 0..1000)."""
    if dim % 2:
        raise ValueError(f"Wan: the time embedding width must be even, got {dim}")
    half = dim // 2
    position = position.to(torch.float32)
    angles = torch.outer(position, torch.pow(10000, -torch.arange(half, device=position.device).to(position).div(half)))
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=1)


def cast_param(param: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A parameter in `like`'s dtype and device (it may be stored in fp8 or on another device)."""
    return param.to(dtype=like.dtype, device=like.device)


class WanRMSNorm(nn.Module):
    """RMS normalisation over the last axis with a learned `weight` (torch's RMSNorm names), the
    weight cast to the input's dtype per call."""

    def __init__(self, dim: int, eps: float = 1e-6, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight=cast_param(self.weight, x), eps=self.eps)


def _norm(dim: int, qk_norm: bool, eps: float, factory: dict[str, Any]) -> nn.Module:
    return WanRMSNorm(dim, eps=eps, **factory) if qk_norm else nn.Identity()


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
              transformer_options: dict[str, Any] | None) -> torch.Tensor:
    """`[B, L, H*D]` queries, `[B, M, H*D]` keys/values -> `[B, L, H*D]` (the patcher's backend)."""
    return calling.attend(q, k, v, heads, transformer_options=transformer_options or {})


class WanSelfAttention(nn.Module):
    """Self-attention: q, k normed over the full width, rotated by the 3-D RoPE `freqs`
    `[1, L, 1, D/2, 2, 2]`, then attended over all video tokens."""

    def __init__(self, dim: int, num_heads: int, window_size: tuple[int, int] = (-1, -1), qk_norm: bool = True,
                 eps: float = 1e-6, kv_dim: int | None = None, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"Wan: width {dim} is not a multiple of {num_heads} heads")
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        kv_dim = dim if kv_dim is None else kv_dim
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.window_size, self.qk_norm, self.eps = window_size, qk_norm, eps
        self.q = ops.Linear(dim, dim, **factory)
        self.k = ops.Linear(kv_dim, dim, **factory)
        self.v = ops.Linear(kv_dim, dim, **factory)
        self.o = ops.Linear(dim, dim, **factory)
        self.norm_q = _norm(dim, qk_norm, eps, factory)
        self.norm_k = _norm(dim, qk_norm, eps, factory)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        b, s, n, d = x.shape[0], x.shape[1], self.num_heads, self.head_dim
        # q first, k after: each one's intermediates are freed before the next (Wan's VRAM order)
        q = apply_rope1(self.norm_q(self.q(x)).view(b, s, n, d), freqs)  # [B, L, H, D]
        k = apply_rope1(self.norm_k(self.k(x)).view(b, s, n, d), freqs)
        # autoregressive video: the cached keys/values of the frames already made come first
        keys, values = cached_keys(transformer_options, k.view(b, s, n * d), self.v(x).view(b, s, n * d))
        out = attention(q.view(b, s, n * d), keys, values, n, transformer_options)
        # ComfyUI's Wan attn1_patch: {"x": attention output, "q", "k": [B, L, H, D], ...} -> x (MultiTalk)
        for patch in ((transformer_options or {}).get("patches") or {}).get("attn1_patch", ()):
            out = patch({"x": out, "q": q, "k": k, "transformer_options": transformer_options})
        return self.o(out)


class WanT2VCrossAttention(WanSelfAttention):
    """Cross-attention from the video tokens to the text tokens (no RoPE)."""

    def forward(self, x: torch.Tensor, context: torch.Tensor, context_img_len: int | None = None,
                transformer_options: dict[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        q = self.norm_q(self.q(x))
        k = self.norm_k(self.k(context))
        return self.o(attention(q, k, self.v(context), self.num_heads, transformer_options))


class WanI2VCrossAttention(WanSelfAttention):
    """Cross-attention to the text and, with separate keys/values (`k_img`, `v_img`), to the
    CLIP-image tokens at the front of `context`; the two results are summed."""

    def __init__(self, dim: int, num_heads: int, window_size: tuple[int, int] = (-1, -1), qk_norm: bool = True,
                 eps: float = 1e-6, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__(dim, num_heads, window_size, qk_norm, eps, dtype=dtype, device=device, operations=operations)
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.k_img = ops.Linear(dim, dim, **factory)
        self.v_img = ops.Linear(dim, dim, **factory)
        self.norm_k_img = _norm(dim, qk_norm, eps, factory)

    def forward(self, x: torch.Tensor, context: torch.Tensor, context_img_len: int | None = None,
                transformer_options: dict[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        # Without image tokens (`context_img_len` None: no CLIP-vision output) ComfyUI's slices
        # `[:None]` / `[None:]` give both attentions the whole text context; kept, so results match.
        context_img, context = context[:, :context_img_len], context[:, context_img_len:]
        q = self.norm_q(self.q(x))
        k_img = self.norm_k_img(self.k_img(context_img))
        img_out = attention(q, k_img, self.v_img(context_img), self.num_heads, transformer_options)
        out = attention(q, self.norm_k(self.k(context)), self.v(context), self.num_heads, transformer_options)
        return self.o(out + img_out)


CROSS_ATTENTION_CLASSES = {"t2v_cross_attn": WanT2VCrossAttention, "i2v_cross_attn": WanI2VCrossAttention}


def repeat_e(e: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Modulation `[B, 1 or T, C]` spread over the tokens of `x` `[B, L, C]`: a per-frame row
    (Wan 2.2's per-frame timesteps) repeated for each of that frame's tokens."""
    if e.shape[1] <= 1:
        return e
    repeats = x.shape[1] // e.shape[1]
    if repeats == 1:
        return e
    if repeats * e.shape[1] == x.shape[1]:
        return torch.repeat_interleave(e, repeats, dim=1)
    return torch.repeat_interleave(e, repeats + 1, dim=1)[:, :x.shape[1]]


def split_modulation(table: torch.Tensor, e: torch.Tensor, x: torch.Tensor, chunks: int) -> tuple[torch.Tensor, ...]:
    """The learned table `[1, k, C]` plus the time modulation `e` (`[B, k, C]`, or `[B, T, k, C]`
    per frame) split into `chunks` rows of `[B, 1 or T, C]`."""
    table = cast_param(table, x)
    if e.ndim < 4:
        return (table + e).chunk(chunks, dim=1)
    return (table.unsqueeze(0) + e).unbind(2)


class WanAttentionBlock(nn.Module):
    """Modulated LayerNorm -> self-attention -> gated residual; LayerNorm (`norm3`) ->
    cross-attention -> residual; modulated LayerNorm -> GELU(tanh) FFN -> gated residual. The
    modulation rows are (shift, scale, gate) for attention, then for the FFN."""

    def __init__(self, cross_attn_type: str, dim: int, ffn_dim: int, num_heads: int,
                 window_size: tuple[int, int] = (-1, -1), qk_norm: bool = True, cross_attn_norm: bool = False,
                 eps: float = 1e-6, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.dim, self.ffn_dim, self.num_heads = dim, ffn_dim, num_heads
        self.window_size, self.qk_norm, self.cross_attn_norm, self.eps = window_size, qk_norm, cross_attn_norm, eps
        self.norm1 = ops.LayerNorm(dim, eps, elementwise_affine=False, **factory)
        self.self_attn = WanSelfAttention(dim, num_heads, window_size, qk_norm, eps, operations=ops, **factory)
        self.norm3 = (ops.LayerNorm(dim, eps, elementwise_affine=True, **factory) if cross_attn_norm
                      else nn.Identity())
        self.cross_attn = CROSS_ATTENTION_CLASSES[cross_attn_type](dim, num_heads, (-1, -1), qk_norm, eps,
                                                                   operations=ops, **factory)
        self.norm2 = ops.LayerNorm(dim, eps, elementwise_affine=False, **factory)
        self.ffn = nn.Sequential(ops.Linear(dim, ffn_dim, **factory), nn.GELU(approximate="tanh"),
                                 ops.Linear(ffn_dim, dim, **factory))
        self.modulation = nn.Parameter(torch.empty(1, 6, dim, **factory))

    def forward(self, x: torch.Tensor, e: torch.Tensor, freqs: torch.Tensor, context: torch.Tensor,
                context_img_len: int | None = 257, transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        # x [B, L, C], e [B, 6, C] (or [B, T, 6, C]), context [B, Nc, C]
        e = split_modulation(self.modulation, e, x, 6)
        y = self.self_attn(torch.addcmul(repeat_e(e[0], x), self.norm1(x), 1 + repeat_e(e[1], x)), freqs,
                           transformer_options=transformer_options)
        x = torch.addcmul(x, y, repeat_e(e[2], x))
        del y
        x = x + self.cross_attn(self.norm3(x), context, context_img_len=context_img_len,
                                transformer_options=transformer_options)
        # ComfyUI's Wan attn2_patch: {"x", "transformer_options"} -> x, after the cross-attention (MultiTalk)
        for patch in ((transformer_options or {}).get("patches") or {}).get("attn2_patch", ()):
            x = patch({"x": x, "transformer_options": transformer_options})
        y = self.ffn(torch.addcmul(repeat_e(e[3], x), self.norm2(x), 1 + repeat_e(e[4], x)))
        return torch.addcmul(x, y, repeat_e(e[5], x))


class VaceWanAttentionBlock(WanAttentionBlock):
    """A VACE hint block: the first one adds `before_proj(hints)` to the video tokens; each runs a
    Wan block on the hints and hands back `after_proj(hints)` (the skip added to the main stream)."""

    def __init__(self, cross_attn_type: str, dim: int, ffn_dim: int, num_heads: int,
                 window_size: tuple[int, int] = (-1, -1), qk_norm: bool = True, cross_attn_norm: bool = False,
                 eps: float = 1e-6, block_id: int = 0, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__(cross_attn_type, dim, ffn_dim, num_heads, window_size, qk_norm, cross_attn_norm, eps,
                         dtype=dtype, device=device, operations=operations)
        ops = operations_or_default(operations)
        self.block_id = block_id
        if block_id == 0:
            self.before_proj = ops.Linear(dim, dim, dtype=dtype, device=device)
        self.after_proj = ops.Linear(dim, dim, dtype=dtype, device=device)

    def forward(self, c: torch.Tensor, x: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if self.block_id == 0:
            c = self.before_proj(c) + x
        c = super().forward(c, **kwargs)
        return self.after_proj(c), c


class Head(nn.Module):
    """Modulated LayerNorm (table rows: shift, scale) and the projection to a patch of outputs."""

    def __init__(self, dim: int, out_dim: int, patch_size: tuple[int, int, int], eps: float = 1e-6,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.dim, self.out_dim, self.patch_size, self.eps = dim, out_dim, tuple(patch_size), eps
        self.norm = ops.LayerNorm(dim, eps, elementwise_affine=False, dtype=dtype, device=device)
        self.head = ops.Linear(dim, math.prod(patch_size) * out_dim, dtype=dtype, device=device)
        self.modulation = nn.Parameter(torch.empty(1, 2, dim, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        # x [B, L, C], e [B, C] or [B, T, C] (per frame)
        table = cast_param(self.modulation, x)
        if e.ndim < 3:
            shift, scale = (table + e.unsqueeze(1)).chunk(2, dim=1)
        else:
            shift, scale = (table.unsqueeze(0) + e.unsqueeze(2)).unbind(2)
        return self.head(torch.addcmul(repeat_e(shift, x), self.norm(x), 1 + repeat_e(scale, x)))


class MLPProj(nn.Module):
    """CLIP-vision penultimate states `[B, 257 (514 for two images), 1280]` -> `[B, n, dim]`:
    LayerNorm, Linear, GELU, Linear, LayerNorm; first-last-frame models add `emb_pos`."""

    def __init__(self, in_dim: int, out_dim: int, flf_pos_embed_token_number: int | None = None,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.proj = nn.Sequential(ops.LayerNorm(in_dim, **factory), ops.Linear(in_dim, in_dim, **factory), nn.GELU(),
                                  ops.Linear(in_dim, out_dim, **factory), ops.LayerNorm(out_dim, **factory))
        self.emb_pos = (nn.Parameter(torch.empty((1, flf_pos_embed_token_number, in_dim), **factory))
                        if flf_pos_embed_token_number is not None else None)

    def forward(self, image_embeds: torch.Tensor) -> torch.Tensor:
        if self.emb_pos is not None:
            tokens = min(image_embeds.shape[1], self.emb_pos.shape[1])
            image_embeds = image_embeds[:, :tokens] + cast_param(self.emb_pos[:, :tokens], image_embeds)
        return self.proj(image_embeds)


class WanCamResidualBlock(nn.Module):
    """conv3x3 -> ReLU -> conv3x3, plus the input."""

    def __init__(self, dim: int, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.conv1 = ops.Conv2d(dim, dim, kernel_size=3, padding=1, dtype=dtype, device=device)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = ops.Conv2d(dim, dim, kernel_size=3, padding=1, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.relu(self.conv1(x))) + x


class WanCamAdapter(nn.Module):
    """The Fun camera adapter: Plücker embeddings `[B, in_dim, F, H, W]` (pixel resolution, one
    frame per latent frame) -> pixel-unshuffled by 8, a strided conv to the width and residual
    blocks -> `[B, dim, F, h, w]`, added to the patch embedding."""

    def __init__(self, in_dim: int, out_dim: int, kernel_size: Any, stride: Any, num_residual_blocks: int = 1,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.pixel_unshuffle = nn.PixelUnshuffle(downscale_factor=8)
        self.conv = ops.Conv2d(in_dim * 64, out_dim, kernel_size=kernel_size, stride=stride, padding=0,
                               dtype=dtype, device=device)
        self.residual_blocks = nn.Sequential(*[WanCamResidualBlock(out_dim, dtype=dtype, device=device, operations=ops)
                                               for _ in range(num_residual_blocks)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bs, c, f, h, w = x.shape
        frames = x.permute(0, 2, 1, 3, 4).reshape(bs * f, c, h, w)
        out = self.residual_blocks(self.conv(self.pixel_unshuffle(frames)))  # [B*F, dim, h', w']
        return out.view(bs, f, *out.shape[1:]).permute(0, 2, 1, 3, 4)
