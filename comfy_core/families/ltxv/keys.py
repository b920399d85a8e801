"""diffusers' `LTXVideoTransformer3DModel` state-dict names <-> ComfyUI's (the original
LTX-Video transformer's) names.

The two layouts hold the same tensors (no fused weights): diffusers' `proj_in` is `patchify_proj`,
`time_embed.*` is `adaln_single.*`, and the attention q/k norms `norm_q` / `norm_k` are `q_norm` /
`k_norm`; everything else (`caption_projection`, `transformer_blocks.N.attn1/attn2.to_q/k/v/out.0`,
`ff.net.0.proj` / `ff.net.2`, the scale-shift tables, `proj_out`) is named alike.
"""
from __future__ import annotations

from typing import Any, Mapping

DIFFUSERS_MARKERS = ("proj_in.weight", "time_embed.linear.weight")
_TOP = (("proj_in.", "patchify_proj."), ("time_embed.", "adaln_single."))
_BLOCK = ((".norm_q.", ".q_norm."), (".norm_k.", ".k_norm."))


def is_diffusers_ltxv(names: Any) -> bool:
    """Whether the names (no prefix) are diffusers' LTX-Video transformer."""
    return all(marker in names for marker in DIFFUSERS_MARKERS) and "patchify_proj.weight" not in names


def diffusers_to_comfy_name(name: str) -> str:
    for old, new in _TOP:
        if name.startswith(old):
            return new + name[len(old):]
    if name.startswith("transformer_blocks."):
        for old, new in _BLOCK:
            name = name.replace(old, new)
    return name


def convert_diffusers_state_dict(state: Mapping[str, Any]) -> dict[str, Any]:
    """diffusers-named tensors -> ComfyUI's names (the same tensors)."""
    return {diffusers_to_comfy_name(k): v for k, v in state.items()}


def comfy_to_diffusers_name(name: str) -> str:
    for new, old in _TOP:
        if name.startswith(old):
            return new + name[len(old):]
    if name.startswith("transformer_blocks."):
        for new, old in _BLOCK:
            name = name.replace(old, new)
    return name


def lora_key_map(names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> target for an LTX-Video DiT whose state-dict names under `diffusion_model.`
    are `names` (`comfy_core.lora.dit_keymap`): the native names (ComfyUI's and kohya's), and
    diffusers' / PEFT's names under `transformer.` and `diffusion_model.` (LTX-Video's trainer
    writes `diffusion_model.` + diffusers' module paths); every target a whole parameter."""
    from comfy_core.families.lora_keys import UNET_PREFIX, native_key_map

    key_map = native_key_map(names)
    for name in names:
        if not name.endswith(".weight"):
            continue
        layer = name[len(UNET_PREFIX):-len(".weight")]
        key_map["transformer." + layer] = name
        diffusers = comfy_to_diffusers_name(layer + ".weight")[:-len(".weight")]
        for prefix in ("transformer.", "diffusion_model."):
            key_map[prefix + diffusers] = name
        key_map["lora_transformer_" + diffusers.replace(".", "_")] = name
    return key_map
