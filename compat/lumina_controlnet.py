"""ComfyUI's `comfy.ldm.lumina.controlnet` (`ZImage_Control`, `ZImageControlTransformerBlock`) and
`comfy_extras.nodes_model_patch.z_image_convert`, as adapters onto the engine's Z-Image Fun
ControlNet (comfy_core/model_patches/zimage_fun.py): the same modules, weights and numbers, built
from ComfyUI's constructor arguments and answering ComfyUI's forward methods.

Behaviour of ComfyUI's `comfy/ldm/lumina/controlnet.py` (read there, written here):

- `ZImageControlTransformerBlock(layer_id, dim, n_heads, n_kv_heads, multiple_of, ffn_dim_multiplier,
  norm_eps, qk_norm, modulation=True, block_id=0, operation_settings=None)`: a Z-Image-modulated
  `JointTransformerBlock` with `after_proj` and, for `block_id == 0`, `before_proj`;
  `forward(c, x, **kwargs)` -> `(after_proj(c'), c')` where `c' = block(before_proj(c) + x)` in
  block 0, `block(c)` otherwise. Here it is the engine's `ZImageControlBlock`; the keyword
  arguments are ComfyUI's (`x_mask` (unused, ComfyUI passes None), `freqs_cis`, `adaln_input`,
  `transformer_options`).
- `ZImage_Control(dim=3840, n_heads=30, n_kv_heads=30, multiple_of=256, ffn_dim_multiplier=8/3,
  norm_eps=1e-5, qk_norm=True, n_control_layers=6, control_in_dim=16, additional_in_dim=0,
  broken=False, refiner_control=False, dtype=None, device=None, operations=None, **kwargs)`:
  `control_layers`, `control_all_x_embedder["2-1"]`, `control_noise_refiner` (2 control blocks with
  `refiner_control`, else 2 plain modulated blocks). It is the engine's `ZImageFunControlNet`, so
  the engine's ZImageFunControlnet / QwenImageDiffsynthControlnet nodes take a MODEL_PATCH over one
  (Fill-Nodes' FL_ZImageControlNetPatch builds it so). `forward(cap_feats, control_context,
  x_freqs_cis, adaln_input)` embeds the control latent (and runs the plain refiner blocks);
  `forward_noise_refiner_block(layer_id, control_context, x, x_attn_mask, x_freqs_cis,
  adaln_input)` and `forward_control_block(...)` return `(skip or None, control_context)`.
  `broken` (the 2.1 releases whose `control_noise_refiner.0.after_proj` is all zero) is the
  engine's `ZImageFunControlConfig.broken`: the refiner steps run through `control_layers` as
  ComfyUI reroutes them (the engine's loader detects those files as ComfyUI does).

The SwiGLU width is ComfyUI's: `multiple_of * ceil(int(ffn_dim_multiplier * dim) / multiple_of)`;
the modulation input `min(dim, 256)` (Z-Image modulation). The frequencies `x_freqs_cis` are the
engine's (what its NextDiT passes to block patches as `pe`).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.families.zimage import zimage_axes
from comfy_core.families.zimage.nextdit import JointTransformerBlock, NextDiTConfig
from comfy_core.model_patches.zimage_fun import (CONTROL_IN_DIM, ZImageControlBlock, ZImageFunControlConfig,
                                                 ZImageFunControlNet, convert_zimage_fun_keys)
from comfy_core.models.unet_blocks import operations_or_default

N_REFINER_LAYERS = 2  # ComfyUI's `n_refiner_layers`


def block_config(dim: int, n_heads: int, n_kv_heads: int | None, multiple_of: int, ffn_dim_multiplier: float | None,
                 norm_eps: float, qk_norm: bool) -> NextDiTConfig:
    """The engine's block structure for ComfyUI's Lumina block arguments (Z-Image modulation)."""
    hidden = int(ffn_dim_multiplier * dim) if ffn_dim_multiplier is not None else dim
    hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
    return NextDiTConfig(dim=dim, n_heads=n_heads, n_kv_heads=n_kv_heads or n_heads, ffn_hidden=hidden,
                         norm_eps=norm_eps, qk_norm=qk_norm, adaln_dim=min(dim, 256),
                         axes_dims=zimage_axes(dim // n_heads), z_image_modulation=True)


def _settings(operation_settings: Mapping[str, Any] | None) -> tuple[dict[str, Any], Any]:
    settings = dict(operation_settings or {})
    return ({"dtype": settings.get("dtype"), "device": settings.get("device")},
            operations_or_default(settings.get("operations")))


class ZImageControlTransformerBlock(ZImageControlBlock):
    """ComfyUI's control block (see the module docstring) over the engine's `ZImageControlBlock`."""

    def __init__(self, layer_id: int, dim: int, n_heads: int, n_kv_heads: int, multiple_of: int,
                 ffn_dim_multiplier: float, norm_eps: float, qk_norm: bool, modulation: bool = True,
                 block_id: int = 0, operation_settings: Mapping[str, Any] | None = None) -> None:
        factory, ops = _settings(operation_settings)
        config = block_config(dim, n_heads, n_kv_heads, multiple_of, ffn_dim_multiplier, norm_eps, qk_norm)
        super().__init__(config, block_id == 0, factory, ops)
        self._comfy_names(layer_id, block_id, dim, n_heads)

    def _comfy_names(self, layer_id: int, block_id: int, dim: int, n_heads: int) -> None:
        self.layer_id, self.block_id = layer_id, block_id
        self.dim, self.head_dim = dim, dim // n_heads

    def forward(self, c: torch.Tensor, x: torch.Tensor, x_mask: Any = None, freqs_cis: torch.Tensor | None = None,
                adaln_input: torch.Tensor | None = None, transformer_options: dict | None = None,
                **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """`c` control tokens `[B, N, D]`, `x` the main stream's image tokens -> (skip, c')."""
        if self.block_id == 0:
            c = self.before_proj(c) + x
        c = JointTransformerBlock.forward(self, c, freqs_cis, adaln_input, transformer_options)
        return self.after_proj(c), c

    def control(self, c: torch.Tensor, x: torch.Tensor, freqs: torch.Tensor,
                vec: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The engine's call (its Z-Image Fun patch): through ComfyUI's `forward` (hooks see it)."""
        return self(c, x, freqs_cis=freqs, adaln_input=vec)


class ZImage_Control(ZImageFunControlNet):  # noqa: N801 - ComfyUI's name
    """ComfyUI's Z-Image Fun ControlNet network (see the module docstring): the engine's
    `ZImageFunControlNet` built from ComfyUI's arguments."""

    def __init__(self, dim: int = 3840, n_heads: int = 30, n_kv_heads: int = 30, multiple_of: int = 256,
                 ffn_dim_multiplier: float = (8.0 / 3.0), norm_eps: float = 1e-5, qk_norm: bool = True,
                 n_control_layers: int = 6, control_in_dim: int = 16, additional_in_dim: int = 0,
                 broken: bool = False, refiner_control: bool = False, dtype: Any = None, device: Any = None,
                 operations: Any = None, **kwargs: Any) -> None:
        if control_in_dim != CONTROL_IN_DIM:
            raise ValueError(f"ZImage_Control: control_in_dim {control_in_dim} (the Z-Image Fun ControlNets take "
                             f"the Flux VAE's {CONTROL_IN_DIM} latent channels)")
        blocks = block_config(dim, n_heads, n_kv_heads, multiple_of, ffn_dim_multiplier, norm_eps, qk_norm)
        config = ZImageFunControlConfig(n_control_layers=int(n_control_layers), n_refiner_layers=N_REFINER_LAYERS,
                                        refiner_control=bool(refiner_control),
                                        additional_in_dim=int(additional_in_dim), blocks=blocks,
                                        broken=bool(broken))
        super().__init__(config, dtype=dtype, device=device, operations=operations)
        self.broken = bool(broken)
        self.control_in_dim = control_in_dim
        self.refiner_control = bool(refiner_control)
        # the control blocks built by the engine are ComfyUI's class (same modules and weights)
        stacks = [self.control_layers] + ([self.control_noise_refiner] if self.refiner_control else [])
        for stack in stacks:
            for index, block in enumerate(stack):
                block.__class__ = ZImageControlTransformerBlock
                block._comfy_names(index, index, dim, n_heads)

    # --- ComfyUI's methods ---

    def forward(self, cap_feats: Any, control_context: torch.Tensor, x_freqs_cis: torch.Tensor,
                adaln_input: torch.Tensor) -> torch.Tensor:
        """Control latent `[B, C, H, W]` -> control tokens `[B, N, D]` (`cap_feats` is unused, as in
        ComfyUI)."""
        return self.embed(control_context, x_freqs_cis, adaln_input)

    def forward_noise_refiner_block(self, layer_id: int, control_context: torch.Tensor, x: torch.Tensor,
                                    x_attn_mask: Any, x_freqs_cis: torch.Tensor,
                                    adaln_input: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        return self.refiner_block(layer_id, control_context, x, x_freqs_cis, adaln_input)

    def forward_control_block(self, layer_id: int, control_context: torch.Tensor, x: torch.Tensor,
                              x_attn_mask: Any, x_freqs_cis: torch.Tensor,
                              adaln_input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.control_block(layer_id, control_context, x, x_freqs_cis, adaln_input)


def z_image_convert(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ComfyUI's `comfy_extras.nodes_model_patch.z_image_convert`: a new state dict with
    `.attention.to_q/to_k/to_v.weight` fused into `.attention.qkv.weight` (q, k, v rows),
    `to_out.0` -> `out`, `norm_q/norm_k` -> `q_norm/k_norm` (the engine's
    `convert_zimage_fun_keys`), keys in sorted order as ComfyUI walks them."""
    converted = convert_zimage_fun_keys(sd)
    return {key: converted[key] for key in sorted(converted)}


__all__ = ["ZImageControlTransformerBlock", "ZImage_Control", "block_config", "z_image_convert"]
