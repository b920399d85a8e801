"""SD3 / SD3.5 ControlNets in diffusers' `SD3ControlNetModel` layout (InstantX's and
diffusers-converted SD3 ControlNets): an MMDiT with fewer joint blocks, no final layer, a zero-
initialised patch embedding of the (VAE-encoded) hint added to the image tokens
(`pos_embed_input.proj`) and one linear projection per block (`controlnet_blocks.N`) whose
outputs are the residuals the main MMDiT adds to its image tokens.

Behaviour of ComfyUI's `comfy/cldm/mmdit.py: ControlNet(MMDiT)` and `comfy/controlnet.py:
load_controlnet_mmdit`: the pooled vector `y` is replaced by zeros (these ControlNets are trained
so, diffusers' `force_zeros_for_pooled_projection`), and the residual of block `i` is repeated
`depth // blocks` times (one less for the last block) so that block `j` of the main model gets the
residual of block `j // (depth // blocks)` and its last (pre-only) block gets none.

- `is_sd3_controlnet(names)`: the file test (`controlnet_blocks.0.weight`, `pos_embed_input.proj.
  weight`, `context_embedder.weight`, and not SAI's own SD3.5 ControlNet format, which has
  `transformer_blocks.0.adaLN_modulation.1.bias`: `dit_embedder.py`).
- `SD3ControlNetConfig.detect_from_weights(tensors)`: the structure from header shapes.
- `convert_sd3_controlnet(state)`: the tensors in the module's (SAI) names.
- `MMDiTControlNet(...)` (ComfyUI's constructor: `num_blocks`, `control_latent_channels` plus the
  MMDiT's arguments) and `build_sd3_controlnet(config)`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.families.sd3.mmdit import MMDiT, MMDiTConfig, MMDiTConfigError
from comfy_core.families.sd3.mmdit_blocks import PatchEmbed
from comfy_core.families.sd3.keys import convert_diffusers_state_dict, sai_shapes_from_diffusers
from comfy_core.models.unet_blocks import operations_or_default

SD35_NATIVE_MARKER = "transformer_blocks.0.adaLN_modulation.1.bias"  # SAI's SD3.5 ControlNet format
INPAINT_CHANNELS = 17  # 16 latent channels + the mask


def is_sd3_controlnet(names: Any) -> bool:
    """Whether `names` (tensor names) are a diffusers-layout SD3 ControlNet with joint blocks
    (ComfyUI's test, plus the text stream's `context_embedder`: diffusers' conversion of SAI's
    SD3.5 ControlNets has single blocks and none, `dit_embedder.is_diffusers_sd35_controlnet`)."""
    return ("controlnet_blocks.0.weight" in names and "pos_embed_input.proj.weight" in names
            and SD35_NATIVE_MARKER not in names and "context_embedder.weight" in names)


@dataclass(frozen=True)
class SD3ControlNetConfig:
    mmdit: MMDiTConfig  # final_layer False; num_blocks = the ControlNet's joint blocks
    control_latent_channels: int = 16  # hint channels of pos_embed_input (17: inpainting, mask concatenated)

    @property
    def concat_mask(self) -> bool:
        """An inpainting ControlNet: the runner concatenates the mask to the hint latent."""
        return self.control_latent_channels == INPAINT_CHANNELS

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "SD3ControlNetConfig":
        """From names and shapes of a diffusers-layout file; `MMDiTConfigError` when inconsistent."""
        shapes = sai_shapes_from_diffusers(tensors, prefix=prefix)
        config = MMDiTConfig.detect_from_weights(shapes, prefix="")
        if config.final_layer:
            raise MMDiTConfigError("SD3 ControlNet: the file has a final layer (proj_out), a ControlNet has none")
        for name in ("pos_embed_input.proj.weight", f"controlnet_blocks.{config.num_blocks - 1}.weight"):
            if name not in shapes:
                raise MMDiTConfigError(f"SD3 ControlNet key {prefix}{name} is missing")
        hint = shapes["pos_embed_input.proj.weight"].shape  # [D, C, p, p]
        if hint[0] != config.hidden_size or tuple(hint[2:]) != (config.patch_size, config.patch_size):
            raise MMDiTConfigError(f"SD3 ControlNet key {prefix}pos_embed_input.proj.weight has shape {hint}, "
                                   f"expected [{config.hidden_size}, C, {config.patch_size}, {config.patch_size}]")
        return cls(mmdit=replace(config, out_channels=config.in_channels), control_latent_channels=hint[1])


def convert_sd3_controlnet(state: Mapping[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    """A diffusers-layout ControlNet's tensors in the module's names (joint blocks renamed and
    q/k/v fused as the MMDiT's; `pos_embed_input.*` and `controlnet_blocks.*` kept as they are)."""
    return convert_diffusers_state_dict(state, prefix=prefix, keep_unmapped=True)


class MMDiTControlNet(MMDiT):
    """ComfyUI's `comfy.cldm.mmdit.ControlNet`: `forward(x, timesteps, y, context, hint)` ->
    `{"output": [residual per main-model block]}`, each `[B, L, D]`."""

    def __init__(self, num_blocks: int | None = None, control_latent_channels: int | None = None,
                 dtype: Any = None, device: Any = None, operations: Any = None, **kwargs: Any) -> None:
        kwargs.pop("final_layer", None)
        super().__init__(dtype=dtype, device=device, operations=operations, final_layer=False,
                         num_blocks=num_blocks, **kwargs)
        ops = operations_or_default(operations)
        self.controlnet_blocks = nn.ModuleList([
            ops.Linear(self.hidden_size, self.hidden_size, dtype=dtype, device=device)
            for _ in range(len(self.joint_blocks))])
        if control_latent_channels is None:
            control_latent_channels = self.in_channels
        self.pos_embed_input = PatchEmbed(None, self.patch_size, control_latent_channels, self.hidden_size, bias=True,
                                          strict_img_size=False, dtype=dtype, device=device, operations=ops)

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, y: torch.Tensor | None = None,  # type: ignore[override]
                context: torch.Tensor | None = None, hint: torch.Tensor | None = None,
                **kwargs: Any) -> dict[str, list[torch.Tensor]]:
        """x `[B, 16, H, W]` (scaled noisy latent), timesteps `[B]` (sigma * 1000), context
        `[B, T, C]`, hint `[B, control_latent_channels, H, W]` (the hint's latent)."""
        if self.y_embedder is not None:
            # SD3 ControlNets are trained without the pooled text (ComfyUI zeroes it too).
            y = torch.zeros(x.shape[0], self.y_embedder.mlp[0].in_features, dtype=x.dtype, device=x.device) \
                if y is None else torch.zeros_like(y)
        if self.context_processor is not None:
            context = self.context_processor(context)
        hw = (x.shape[-2], x.shape[-1])
        x = self.x_embedder(x) + self.cropped_pos_embed(hw, device=x.device).to(dtype=x.dtype, device=x.device)
        x = x + self.pos_embed_input(hint)  # [B, L, D]
        c = self.t_embedder(timesteps, dtype=x.dtype)  # [B, D]
        if y is not None and self.y_embedder is not None:
            c = c + self.y_embedder(y)
        if context is not None:
            context = self.context_embedder(context)
        blocks = len(self.joint_blocks)
        repeat = self.depth // blocks  # main-model blocks per ControlNet block
        output: list[torch.Tensor] = []
        for i, block in enumerate(self.joint_blocks):
            context, x = block(context, x, c=c, use_checkpoint=self.use_checkpoint)
            residual = self.controlnet_blocks[i](x)  # [B, L, D]
            # The same tensor repeated: the runner scales a shared residual once.
            output.extend([residual] * (repeat - 1 if i == blocks - 1 else repeat))
        return {"output": output}


def build_sd3_controlnet(config: SD3ControlNetConfig, *, dtype: Any = None, device: Any = None,
                         operations: Any = None) -> MMDiTControlNet:
    kwargs = config.mmdit.model_kwargs()
    kwargs.pop("out_channels", None)
    network = MMDiTControlNet(control_latent_channels=config.control_latent_channels, dtype=dtype, device=device,
                              operations=operations, **kwargs)
    network.config = config.mmdit
    return network


# ComfyUI's class name (comfy.cldm.mmdit.ControlNet).
ControlNet = MMDiTControlNet

__all__ = ["ControlNet", "MMDiTControlNet", "SD3ControlNetConfig", "build_sd3_controlnet", "convert_sd3_controlnet",
           "is_sd3_controlnet"]
