"""Flux LoRA layouts that need renaming before the key map can read them (ComfyUI 0.3.64's
comfy/lora_convert.py `convert_lora`, whose detection rules these follow; written here).

- USO (ByteDance's "USO" style/subject LoRA for Flux.1, XLabs-style processor names):
  `double_blocks.N.processor.qkv_lora1.up.weight` and the like; renamed onto the BFL layout
  (`diffusion_model.double_blocks.N.img_attn.qkv.lora_up.weight`; the single blocks' `qkv_lora`
  onto `linear1_qkv`, the q/k/v rows of `linear1`).
- BFL's control LoRAs (FLUX.1 Canny/Depth dev LoRA: `img_in.lora_A.weight` with
  `single_blocks.0.norm.key_norm.scale`) widen `img_in` to take the control latent as extra
  input channels: `img_in`'s LoRA gets a `reshape_weight` record (the widened shape, out x the
  LoRA's inputs; the weight is zero-padded to it first), the LoRA biases become `diff_b` records
  and the norm scales `set_weight` records, under `diffusion_model.`. Flux then reads its input
  width from the patched `img_in` and takes InstructPixToPixConditioning's latent as the extra
  channels (`FluxConditions.concat_cond`), as ComfyUI's Flux does.

Anything else is returned unchanged.
"""
from __future__ import annotations

from typing import Mapping

import torch

# USO's module names -> BFL's, in the order they are tried on each key (`qkv_lora1/2` before
# the single blocks' bare `qkv_lora`).
_USO_RENAMES = (
    (".down.weight", ".lora_down.weight"), (".up.weight", ".lora_up.weight"),
    (".qkv_lora2.", ".txt_attn.qkv."), (".qkv_lora1.", ".img_attn.qkv."),
    (".proj_lora1.", ".img_attn.proj."), (".proj_lora2.", ".txt_attn.proj."),
    (".qkv_lora.", ".linear1_qkv."), (".proj_lora.", ".linear2."), (".processor.", "."),
)


def is_uso_lora(tensors: Mapping[str, object]) -> bool:
    """ComfyUI's test: the last single block's and the last double block's processor LoRAs."""
    return ("single_blocks.37.processor.qkv_lora.up.weight" in tensors
            and "double_blocks.18.processor.qkv_lora2.up.weight" in tensors)


def is_bfl_control_lora(tensors: Mapping[str, object]) -> bool:
    return "img_in.lora_A.weight" in tensors and "single_blocks.0.norm.key_norm.scale" in tensors


def convert_bfl_control_lora(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A BFL control LoRA in the records the key map reads (see the module docstring)."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        renamed = key.replace(".lora_B.bias", ".diff_b").replace("_norm.scale", "_norm.scale.set_weight")
        out["diffusion_model." + renamed] = tensor
    widened = (tensors["img_in.lora_B.weight"].shape[0], tensors["img_in.lora_A.weight"].shape[1])
    out["diffusion_model.img_in.reshape_weight"] = torch.tensor(widened)
    return out


def convert_uso_lora(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """USO's keys in BFL names under `diffusion_model.` (tensors unchanged)."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        renamed = key
        for old, new in _USO_RENAMES:
            renamed = renamed.replace(old, new)
        out["diffusion_model." + renamed] = tensor
    return out


def convert_dit_lora(tensors: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    """`tensors` in a layout the key map reads (see the module docstring)."""
    if is_bfl_control_lora(tensors):
        return convert_bfl_control_lora(tensors)
    if is_uso_lora(tensors):
        return convert_uso_lora(tensors)
    return tensors
