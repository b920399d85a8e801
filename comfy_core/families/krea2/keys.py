"""Krea 2's key spellings: diffusers' `Krea2Transformer2DModel` layout converted to ComfyUI's (the
released files' names, our module names), and the LoRA key map.

Diffusers' names (its `single_file_utils.convert_krea2_transformer_checkpoint_to_diffusers` maps the
other way): `img_in` = `first`, `time_embed.linear_1/2` = `tmlp.0/2`, `time_mod_proj` = `tproj.1`,
`txt_in.norm.weight` / `linear_1` / `linear_2` = `txtmlp.0.scale` / `.1` / `.3`, `text_fusion` =
`txtfusion`, `transformer_blocks` = `blocks`, `final_layer.*` = `last.*` (`scale_shift_table` =
`modulation.lin`); inside blocks `to_q/k/v` = `wq/wk/wv`, `to_out.0` = `wo`, `to_gate` = `gate`,
`norm_q/k.weight` = `qknorm.qnorm/knorm.scale`, `ff` = `mlp`, `norm1/2.weight` = `prenorm/postnorm.scale`,
and a block's `scale_shift_table` [6, width] = `mod.lin` flattened.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from comfy_core.families.lora_keys import native_key_map

UNET_PREFIX = "diffusion_model."
DIFFUSERS_MARKER = "text_fusion.projector.weight"

_PREFIXES = (("img_in.", "first."), ("time_embed.linear_1.", "tmlp.0."), ("time_embed.linear_2.", "tmlp.2."),
             ("time_mod_proj.", "tproj.1."), ("txt_in.norm.weight", "txtmlp.0.scale"),
             ("txt_in.linear_1.", "txtmlp.1."), ("txt_in.linear_2.", "txtmlp.3."), ("text_fusion.", "txtfusion."),
             ("transformer_blocks.", "blocks."), ("final_layer.linear.", "last.linear."),
             ("final_layer.norm.weight", "last.norm.scale"), ("final_layer.scale_shift_table", "last.modulation.lin"))
_INNER = ((".attn.to_q.", ".attn.wq."), (".attn.to_k.", ".attn.wk."), (".attn.to_v.", ".attn.wv."),
          (".attn.to_out.0.", ".attn.wo."), (".attn.to_gate.", ".attn.gate."),
          (".attn.norm_q.weight", ".attn.qknorm.qnorm.scale"), (".attn.norm_k.weight", ".attn.qknorm.knorm.scale"),
          (".ff.", ".mlp."), (".norm1.weight", ".prenorm.scale"), (".norm2.weight", ".postnorm.scale"),
          (".scale_shift_table", ".mod.lin"))


def is_diffusers(names: Iterable[str]) -> bool:
    return any(name.endswith(DIFFUSERS_MARKER) for name in names)


def comfy_name(name: str) -> str:
    """One diffusers name -> ComfyUI's."""
    for old, new in _PREFIXES:
        if name.startswith(old):
            name = new + name[len(old):]
            break
    for old, new in _INNER:
        name = name.replace(old, new)
    return name


def from_diffusers(tensors: Mapping[str, Any]) -> dict[str, Any]:
    """A diffusers-layout state dict -> ComfyUI's names (blocks' modulation tables flattened)."""
    out: dict[str, Any] = {}
    for name, value in tensors.items():
        new = comfy_name(name)
        if new.startswith("blocks.") and new.endswith(".mod.lin") and getattr(value, "ndim", 1) == 2:
            value = value.reshape(-1)
        out[new] = value
    return out


def lora_key_map(names: Iterable[str]) -> dict[str, Any]:
    """LoRA layer name -> target tensor name for the network's `names` (`diffusion_model.*`):
    ComfyUI's generic forms, and diffusers' / PEFT's `transformer.<diffusers module>`."""
    names = list(names)
    key_map = native_key_map(names)
    for name in names:
        if not (name.startswith(UNET_PREFIX) and name.endswith(".weight")):
            continue
        module = name[len(UNET_PREFIX):-len(".weight")]
        key_map["transformer." + diffusers_module(module)] = name
    return key_map


def diffusers_module(module: str) -> str:
    """Our module path -> diffusers' (Linear layers: the names LoRAs target)."""
    name = module + "."
    for old, new in _PREFIXES:
        if old.endswith(".") and name.startswith(new):
            name = old + name[len(new):]
            break
    for old, new in _INNER:
        if old.endswith(".") and new.endswith("."):
            name = name.replace(new, old)
    return name[:-1]


__all__ = ["DIFFUSERS_MARKER", "comfy_name", "diffusers_module", "from_diffusers", "is_diffusers", "lora_key_map"]
