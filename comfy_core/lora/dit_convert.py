"""Flux LoRA layouts that need renaming before the key map can read them (ComfyUI 0.3.64's
comfy/lora_convert.py `convert_lora`, whose detection rules these follow; written here).

- USO (ByteDance's "USO" style/subject LoRA for Flux.1, XLabs-style processor names):
  `double_blocks.N.processor.qkv_lora1.up.weight` and the like; renamed onto the BFL layout
  (`diffusion_model.double_blocks.N.img_attn.qkv.lora_up.weight`; the single blocks' `qkv_lora`
  onto `linear1_qkv`, the q/k/v rows of `linear1`).
- BFL's control LoRAs (FLUX.1 Canny/Depth dev LoRA: `img_in.lora_A.weight` with
  `single_blocks.0.norm.key_norm.scale`) widen `img_in` to take the control latent as extra
  input channels, which needs a Flux built with those channels; refused with a typed error.

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


class UnsupportedLoraLayout(NotImplementedError):
    """A LoRA layout this engine recognises but cannot apply (BFL's Flux control LoRAs)."""


def is_uso_lora(tensors: Mapping[str, object]) -> bool:
    """ComfyUI's test: the last single block's and the last double block's processor LoRAs."""
    return ("single_blocks.37.processor.qkv_lora.up.weight" in tensors
            and "double_blocks.18.processor.qkv_lora2.up.weight" in tensors)


def is_bfl_control_lora(tensors: Mapping[str, object]) -> bool:
    return "img_in.lora_A.weight" in tensors and "single_blocks.0.norm.key_norm.scale" in tensors


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
        raise UnsupportedLoraLayout(
            "a BFL Flux control LoRA (FLUX.1 Canny/Depth LoRA): it widens img_in for the control image's latent, "
            "which needs a Flux model built with those input channels; not supported here")
    if is_uso_lora(tensors):
        return convert_uso_lora(tensors)
    return tensors
