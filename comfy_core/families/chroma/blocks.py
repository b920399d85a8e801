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
`final_layer.linear`, as Flux's): Flux's blocks and final layer themselves
(`comfy_core.families.flux.blocks`, built with `modulation=False`), so the maths (QK RMS norm, RoPE
attention, tanh-GELU MLPs) is one piece of code.

Every layer is built from `operations` (default torch's layers), on any device (meta included)
and never initialised: the loader assigns the weights.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from comfy_core.families.flux import blocks as flux_blocks
from comfy_core.families.flux.blocks import MLPEmbedder, ModulationOut, RMSNorm
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


class DoubleStreamBlock(flux_blocks.DoubleStreamBlock):
    """Flux's double-stream block without its own modulation layers (`modulation=False`): fed `vec`
    `((img_mod1, img_mod2), (txt_mod1, txt_mod2))` (`ChromaModulationOut`s) by the approximator;
    ComfyUI's argument order (`pe` before `vec`)."""

    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float, qkv_bias: bool = False,
                 flipped_img_txt: bool = False, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__(hidden_size, num_heads, mlp_ratio, qkv_bias, flipped_img_txt, dtype=dtype, device=device,
                         operations=operations, modulation=False)

    def forward(self, img: torch.Tensor, txt: torch.Tensor, pe: torch.Tensor | None,  # type: ignore[override]
                vec: Any, attn_mask: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return super().forward(img, txt, vec, pe, attn_mask=attn_mask, transformer_options=transformer_options)


class SingleStreamBlock(flux_blocks.SingleStreamBlock):
    """Flux's single-stream block (parallel attention + MLP, Dehghani et al. 2023) without its own
    modulation layer: fed `vec` (one `ChromaModulationOut`) by the approximator."""

    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float = 4.0, qk_scale: float | None = None,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__(hidden_size, num_heads, mlp_ratio, qk_scale, dtype=dtype, device=device,
                         operations=operations, modulation=False)

    def forward(self, x: torch.Tensor, pe: torch.Tensor | None, vec: ModulationOut,  # type: ignore[override]
                attn_mask: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        # x [B, N, C] (text tokens first)
        return self.modulated_forward(x, vec, pe, attn_mask, None, transformer_options)


class LastLayer(flux_blocks.LastLayer):
    """Flux's final layer without `adaLN_modulation`, given `vec = (shift, scale)` (each `[B, 1, C]`);
    its projection gives `out_channels` per token (Chroma's `out_channels` is already the patched
    width: `patch_size` is not applied, as ComfyUI's)."""

    def __init__(self, hidden_size: int, patch_size: int, out_channels: int, dtype: Any = None,
                 device: Any = None, operations: Any = None) -> None:
        super().__init__(hidden_size, 1, out_channels, dtype=dtype, device=device, operations=operations,
                         modulation=False)

    def forward(self, x: torch.Tensor,  # type: ignore[override]
                vec: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        shift, scale = vec
        shift, scale = shift.squeeze(1)[:, None, :], scale.squeeze(1)[:, None, :]  # [B, 1, C]
        return self.modulated_forward(x, shift, scale)  # [B, N, out_channels]
