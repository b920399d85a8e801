"""Chroma's building blocks: Flux.1's double- and single-stream blocks and final layer without
their own adaLN projections, and the `Approximator` that makes every block's modulation.

Chroma (lodestones 2025, huggingface.co/lodestones/Chroma; a Flux.1-schnell derivative) prunes
Flux's per-block `img_mod` / `txt_mod` / `modulation` / `adaLN_modulation` linears (about 3.3B of
its 12B parameters) and the `time_in` / `vector_in` / `guidance_in` embedders; one small MLP, the
`distilled_guidance_layer` (`Approximator`), maps `[timestep, guidance, modulation index]`
embeddings to one `[hidden]` row per modulation vector (shift, scale or gate) of every block.
Behaviour, names, constructor and forward arguments as ComfyUI's `comfy/ldm/chroma/layers.py`
(state-dict keys: `distilled_guidance_layer.in_proj`, `.layers.N.in_layer/out_layer`,
`.norms.N.scale`, `.out_proj`; the blocks' `img_attn.qkv`, `img_mlp.0/2`, `linear1/linear2`,
`final_layer.linear`, as Flux's); written here over our Flux pieces (`flux_blocks`), whose maths
(QK RMS norm, RoPE attention through `flux_math.attention`, tanh-GELU MLPs) is the same.

Every layer is built from `operations` (default torch's layers), on any device (meta included)
and never initialised: the loader assigns the weights.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from comfy_core.families.flux import blocks as flux_blocks, math as flux_math
from comfy_core.families.flux.blocks import (MLPEmbedder, ModulationOut, RMSNorm, SelfAttention, _clamp_fp16,
                                           _heads, _mlp, apply_mod)
from comfy_core.models.unet_blocks import operations_or_default


class ChromaModulationOut(ModulationOut):
    """A `ModulationOut` cut from the approximator's output rows."""

    @classmethod
    def from_offset(cls, tensor: torch.Tensor, offset: int = 0) -> ModulationOut:
        """Rows `offset`, `offset + 1`, `offset + 2` of `tensor` `[B, L, C]` as shift, scale, gate
        (each `[B, 1, C]`)."""
        return cls(shift=tensor[:, offset:offset + 1, :], scale=tensor[:, offset + 1:offset + 2, :],
                   gate=tensor[:, offset + 2:offset + 3, :])


class Approximator(nn.Module):
    """`in_proj`, then `n_layers` residual `x + MLPEmbedder(RMSNorm(x))`, then `out_proj`, applied
    to each row of `[B, L, in_dim]` independently -> `[B, L, out_dim]`."""

    def __init__(self, in_dim: int, out_dim: int, hidden_dim: int, n_layers: int = 5, dtype: Any = None,
                 device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.in_proj = ops.Linear(in_dim, hidden_dim, bias=True, **factory)
        self.layers = nn.ModuleList(MLPEmbedder(hidden_dim, hidden_dim, operations=ops, **factory)
                                    for _ in range(n_layers))
        self.norms = nn.ModuleList(RMSNorm(hidden_dim, operations=ops, **factory) for _ in range(n_layers))
        self.out_proj = ops.Linear(hidden_dim, out_dim, **factory)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.in_proj(x)  # [B, L, hidden_dim]
        for layer, norm in zip(self.layers, self.norms):
            x = x + layer(norm(x))
        return self.out_proj(x)  # [B, L, out_dim]


class DoubleStreamBlock(nn.Module):
    """Flux's double-stream block fed its modulations: `vec` is `((img_mod1, img_mod2),
    (txt_mod1, txt_mod2))` (`ChromaModulationOut`s), joint attention over `[txt, img]`."""

    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float, qkv_bias: bool = False,
                 flipped_img_txt: bool = False, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        mlp_hidden_dim = int(hidden_size * mlp_ratio)
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        for stream in ("img", "txt"):
            setattr(self, f"{stream}_norm1", ops.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6, **factory))
            setattr(self, f"{stream}_attn", SelfAttention(hidden_size, num_heads, qkv_bias=qkv_bias, operations=ops,
                                                          **factory))
            setattr(self, f"{stream}_norm2", ops.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6, **factory))
            setattr(self, f"{stream}_mlp", _mlp(hidden_size, mlp_hidden_dim, ops, factory))
        self.flipped_img_txt = flipped_img_txt

    def _qkv(self, stream: str, x: torch.Tensor,
             mod: ModulationOut) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        attn: SelfAttention = getattr(self, f"{stream}_attn")
        modulated = apply_mod(getattr(self, f"{stream}_norm1")(x), 1 + mod.scale, mod.shift)  # [B, N, C]
        q, k, v = _heads(attn.qkv(modulated), self.num_heads)  # each [B, H, N, d]
        q, k = attn.norm(q, k, v)
        return q, k, v

    def _residuals(self, stream: str, x: torch.Tensor, attn_out: torch.Tensor, mod1: ModulationOut,
                   mod2: ModulationOut) -> torch.Tensor:
        attn: SelfAttention = getattr(self, f"{stream}_attn")
        x = x + apply_mod(attn.proj(attn_out), mod1.gate)
        hidden = apply_mod(getattr(self, f"{stream}_norm2")(x), 1 + mod2.scale, mod2.shift)
        return x + apply_mod(getattr(self, f"{stream}_mlp")(hidden), mod2.gate)

    def forward(self, img: torch.Tensor, txt: torch.Tensor, pe: torch.Tensor | None, vec: Any,
                attn_mask: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        # img [B, Ni, C], txt [B, Nt, C], pe [B, 1, Nt+Ni, d/2, 2, 2]
        (img_mod1, img_mod2), (txt_mod1, txt_mod2) = vec
        img_q, img_k, img_v = self._qkv("img", img, img_mod1)
        txt_q, txt_k, txt_v = self._qkv("txt", txt, txt_mod1)
        first, second = (txt_q, txt_k, txt_v), (img_q, img_k, img_v)
        if self.flipped_img_txt:
            first, second = second, first
        attn = flux_math.attention(torch.cat((first[0], second[0]), dim=2), torch.cat((first[1], second[1]), dim=2),
                                   torch.cat((first[2], second[2]), dim=2), pe=pe, mask=attn_mask,
                                   transformer_options=transformer_options)  # [B, Nt+Ni, C]
        if self.flipped_img_txt:
            img_attn, txt_attn = attn[:, :img.shape[1]], attn[:, img.shape[1]:]
        else:
            txt_attn, img_attn = attn[:, :txt.shape[1]], attn[:, txt.shape[1]:]
        img = self._residuals("img", img, img_attn, img_mod1, img_mod2)
        txt = self._residuals("txt", txt, txt_attn, txt_mod1, txt_mod2)
        return img, _clamp_fp16(txt)


class SingleStreamBlock(flux_blocks.SingleStreamBlock):
    """Flux's single-stream block (parallel attention + MLP, Dehghani et al. 2023) without its own
    modulation layer: fed `vec` (one `ChromaModulationOut`) by the approximator."""

    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float = 4.0, qk_scale: float | None = None,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__(hidden_size, num_heads, mlp_ratio, qk_scale, dtype=dtype, device=device,
                         operations=operations)
        del self.modulation

    def forward(self, x: torch.Tensor, pe: torch.Tensor | None, vec: ModulationOut,  # type: ignore[override]
                attn_mask: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        # x [B, N, C] (text tokens first)
        return self.modulated_forward(x, vec, pe, attn_mask, None, transformer_options)


class LastLayer(nn.Module):
    """The final LayerNorm modulated by `vec = (shift, scale)` (each `[B, 1, C]`) and the projection
    to `out_channels` per token (Chroma's `out_channels` is already the patched width)."""

    def __init__(self, hidden_size: int, patch_size: int, out_channels: int, dtype: Any = None,
                 device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.norm_final = ops.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6, **factory)
        self.linear = ops.Linear(hidden_size, out_channels, bias=True, **factory)

    def forward(self, x: torch.Tensor, vec: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        shift, scale = vec
        shift, scale = shift.squeeze(1)[:, None, :], scale.squeeze(1)[:, None, :]  # [B, 1, C]
        return self.linear(apply_mod(self.norm_final(x), 1 + scale, shift))  # [B, N, out_channels]
