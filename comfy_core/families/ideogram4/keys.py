"""Ideogram 4's diffusers names and LoRA spellings.

ComfyUI's names (`comfy/ldm/ideogram4/model.py`) and diffusers' (`Ideogram4Transformer2DModel`)
differ only in the attention: ComfyUI fuses `attention.to_q` / `to_k` / `to_v` into `attention.qkv`
(q rows first) and calls `attention.to_out.0` `attention.o`. A LoRA names its targets as ComfyUI's
generic forms (`diffusion_model.<module>`, kohya's `lora_unet_<module with _>`) or as diffusers' /
PEFT's `transformer.<module>` in diffusers' names (the q / k / v ones patch their third of `qkv`):
ComfyUI's lora.py has no Ideogram-specific entry in the copies read, and the trainers that target
Ideogram 4 (SimpleTuner: `qkv`, `o`, `w1`, `w2`, `w3`) write ComfyUI's module names.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

import torch

from comfy_core.families.lora_keys import add_diffusers_names, native_key_map

UNET_PREFIX = "diffusion_model."
_QKV = re.compile(r"^(layers\.\d+\.attention)\.qkv\.weight$")
_DIFFUSERS_QKV = re.compile(r"^(layers\.\d+\.attention)\.to_([qkv])\.weight$")


def lora_key_map(names: Iterable[str], width: int | None = None) -> dict[str, Any]:
    """LoRA layer name -> target for the network's `names` (`diffusion_model.*`); with the network's
    `width`, diffusers' `to_q` / `to_k` / `to_v` patch their `(qkv, (0, offset, width))` slices."""
    names = list(names)
    key_map = native_key_map(names)
    present = set(names)
    diffusers: dict[str, Any] = {}
    for name in names:
        if not (name.startswith(UNET_PREFIX) and name.endswith(".weight")):
            continue
        module = name[len(UNET_PREFIX):]
        match = _QKV.match(module)
        if match:
            if width is not None:
                for index, part in enumerate("qkv"):
                    diffusers[f"{match.group(1)}.to_{part}.weight"] = (name, (0, index * width, width))
            continue
        diffusers[module.replace(".attention.o.weight", ".attention.to_out.0.weight")] = name
    add_diffusers_names(key_map, diffusers, present, ("transformer.", "diffusion_model."), ("lora_transformer_",))
    return key_map


def from_diffusers(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A diffusers-layout Ideogram 4 state dict in ComfyUI's names: q / k / v concatenated into
    `qkv`, `to_out.0` renamed `o`; everything else as it is."""
    out: dict[str, torch.Tensor] = {}
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        match = _DIFFUSERS_QKV.match(name)
        if match:
            parts.setdefault(match.group(1), {})[match.group(2)] = tensor
        else:
            out[name.replace(".attention.to_out.0.", ".attention.o.")] = tensor
    for module, qkv in parts.items():
        out[f"{module}.qkv.weight"] = torch.cat([qkv["q"], qkv["k"], qkv["v"]], dim=0)
    return out


def is_diffusers(names: Iterable[str]) -> bool:
    """diffusers' layout: split q / k / v in the first block."""
    return "layers.0.attention.to_q.weight" in set(names)


__all__ = ["from_diffusers", "is_diffusers", "lora_key_map"]
