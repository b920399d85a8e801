"""Hunyuan3D 2.0's shape DiT (`Hunyuan3Dv2DiT`) and `Hunyuan3DDiTConfig` read from weights.

Tencent's Hunyuan3D 2.0 (Zhao et al. 2025, "Hunyuan3D 2.0: Scaling Diffusion Models for High
Resolution Textured 3D Assets Generation", arXiv 2501.12202), as ComfyUI runs it
(`comfy/ldm/hunyuan3d/model.py`, state-dict names the same); written here on Flux.1's blocks
(`flux/blocks.py`), without positions (no RoPE):

- the latent `[B, 64, N]` (N shape tokens) as tokens, `latent_in` to the width;
- the time input is `1 - t` (Hunyuan3D's flow runs the other way) through Flux's sinusoidal
  embedding of `1000 t` with a max period of 1000 (ComfyUI's note: the release set the period
  where the time factor was meant) and `time_in`; the guidance (turbo releases: `guidance_in`)
  embedded the same way and added;
- the image tokens (DINOv2's last hidden state) through `cond_in`;
- Flux's double-stream blocks over (image tokens, shape tokens), then single-stream blocks over
  their concatenation, the image tokens dropped, Flux's final layer; the output negated (again
  the reversed flow), `[B, 64, N]`.

Blocks can be replaced through `transformer_options["patches_replace"]["dit"]` with ComfyUI's keys
`("double_block", i)` / `("single_block", i)` and arguments.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.families.flux.blocks import (DoubleStreamBlock, LastLayer, MLPEmbedder, SingleStreamBlock,
                                             timestep_embedding)
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

NUM_HEADS = 16  # ComfyUI's detection (the weights do not show heads); the released width 1024 = 16 x 64
TIME_PERIOD = 1000.0  # the release's max period (see the module docstring)
TIME_DIM = 256
MINI_DEPTH = 8  # ComfyUI's Hunyuan3Dv2mini: 8 double blocks


class Hunyuan3DConfigError(ValueError):
    """Weights that do not form a Hunyuan3D DiT."""


@dataclass(frozen=True)
class Hunyuan3DDiTConfig:
    """What the network's constructor takes (ComfyUI's `Hunyuan3Dv2` arguments)."""

    in_channels: int = 64
    context_in_dim: int = 1536
    hidden_size: int = 1024
    mlp_ratio: float = 4.0
    num_heads: int = NUM_HEADS
    depth: int = 16
    depth_single_blocks: int = 32
    qkv_bias: bool = True
    guidance_embed: bool = False

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Hunyuan3DDiTConfig":
        """Widths and depths from names and shapes, as ComfyUI's detection reads them (heads 16,
        MLP ratio 4, q/k/v biases)."""
        shape = shape_reader(tensors, prefix, Hunyuan3DConfigError, "Hunyuan3D DiT")
        hidden, in_channels = shape("latent_in.weight")
        context = shape("cond_in.weight")[1]
        depth = count_numbered(tensors, prefix, "double_blocks", Hunyuan3DConfigError, "Hunyuan3D DiT")
        single = count_numbered(tensors, prefix, "single_blocks", Hunyuan3DConfigError, "Hunyuan3D DiT")
        if hidden % NUM_HEADS:
            raise Hunyuan3DConfigError(f"Hunyuan3D DiT: width {hidden} is not divisible by {NUM_HEADS} heads")
        if depth and shape("double_blocks.0.img_mlp.0.weight")[0] != 4 * hidden:
            raise Hunyuan3DConfigError("Hunyuan3D DiT: the double blocks' MLP is not 4x the width")
        return cls(in_channels=int(in_channels), context_in_dim=int(context), hidden_size=int(hidden),
                   depth=depth, depth_single_blocks=single,
                   guidance_embed=prefix + "guidance_in.in_layer.weight" in tensors)

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (`model_detection.detect_unet_config`'s Hunyuan 3D entry)."""
        return {"image_model": "hunyuan3d2", "in_channels": self.in_channels, "context_in_dim": self.context_in_dim,
                "hidden_size": self.hidden_size, "mlp_ratio": self.mlp_ratio, "num_heads": self.num_heads,
                "depth": self.depth, "depth_single_blocks": self.depth_single_blocks, "qkv_bias": self.qkv_bias,
                "guidance_embed": self.guidance_embed}


class Hunyuan3Dv2DiT(nn.Module):
    """See the module docstring. `forward(x [B, C, N], timestep [B], context [B, M, ctx], guidance [B])`."""

    # DIFFUSION_MODEL wrappers' positional arguments, ComfyUI's `_forward` order (comfy_core/models/diffusion.py)
    wrapper_arguments = ("x", "timesteps", "context", "guidance", "transformer_options")

    def __init__(self, config: Hunyuan3DDiTConfig, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        width = config.hidden_size
        self.latent_in = ops.Linear(config.in_channels, width, bias=True, **factory)
        self.time_in = MLPEmbedder(TIME_DIM, width, operations=ops, **factory)
        self.guidance_in = MLPEmbedder(TIME_DIM, width, operations=ops, **factory) if config.guidance_embed else None
        self.cond_in = ops.Linear(config.context_in_dim, width, **factory)
        self.double_blocks = nn.ModuleList([
            DoubleStreamBlock(width, config.num_heads, mlp_ratio=config.mlp_ratio, qkv_bias=config.qkv_bias,
                              operations=ops, **factory) for _ in range(config.depth)])
        self.single_blocks = nn.ModuleList([
            SingleStreamBlock(width, config.num_heads, mlp_ratio=config.mlp_ratio, operations=ops, **factory)
            for _ in range(config.depth_single_blocks)])
        self.final_layer = LastLayer(width, 1, config.in_channels, operations=ops, **factory)

    @classmethod
    def from_config(cls, config: Hunyuan3DDiTConfig, operations: Any = None) -> "Hunyuan3Dv2DiT":
        return cls(config, operations=operations)

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor,
                guidance: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None,
                **kwargs: Any) -> torch.Tensor:
        options = transformer_options if transformer_options is not None else {}
        img = self.latent_in(x.movedim(-1, -2))  # [B, N, W]
        time = 1.0 - timestep
        vec = self.time_in(timestep_embedding(time, TIME_DIM, TIME_PERIOD).to(img.dtype))  # [B, W]
        if self.guidance_in is not None and guidance is not None:
            vec = vec + self.guidance_in(timestep_embedding(guidance, TIME_DIM, TIME_PERIOD).to(img.dtype))
        txt = self.cond_in(context)  # [B, M, W]
        replace = options.get("patches_replace", {}).get("dit", {})
        for i, block in enumerate(self.double_blocks):
            if ("double_block", i) in replace:
                def original(args: dict[str, Any], block: nn.Module = block) -> dict[str, torch.Tensor]:
                    out_img, out_txt = block(img=args["img"], txt=args["txt"], vec=args["vec"], pe=args["pe"],
                                             attn_mask=args.get("attn_mask"),
                                             transformer_options=args["transformer_options"])
                    return {"img": out_img, "txt": out_txt}

                out = replace[("double_block", i)]({"img": img, "txt": txt, "vec": vec, "pe": None, "attn_mask": None,
                                                    "transformer_options": options}, {"original_block": original})
                img, txt = out["img"], out["txt"]
            else:
                img, txt = block(img=img, txt=txt, vec=vec, pe=None, attn_mask=None, transformer_options=options)
        joint = torch.cat((txt, img), dim=1)  # [B, M + N, W]
        for i, block in enumerate(self.single_blocks):
            if ("single_block", i) in replace:
                def original_single(args: dict[str, Any], block: nn.Module = block) -> dict[str, torch.Tensor]:
                    return {"img": block(args["img"], vec=args["vec"], pe=args["pe"], attn_mask=args.get("attn_mask"),
                                         transformer_options=args["transformer_options"])}

                joint = replace[("single_block", i)]({"img": joint, "vec": vec, "pe": None, "attn_mask": None,
                                                      "transformer_options": options},
                                                     {"original_block": original_single})["img"]
            else:
                joint = block(joint, vec=vec, pe=None, attn_mask=None, transformer_options=options)
        img = self.final_layer(joint[:, txt.shape[1]:], vec)  # [B, N, C]
        return -img.movedim(-2, -1)
