"""The LoRA spellings the DiT families' key maps share (`lora_key_map` in their `keys.py`; read by
`comfy_core.lora.dit_keymap`): ComfyUI's native names and kohya's for every tensor under
`diffusion_model.`, and the diffusers / PEFT / OneTrainer / LyCORIS names of a diffusers key map.
Generic: no family is named here (ComfyUI 0.3.64, comfy/lora.py `model_lora_keys_unet`).
"""
from __future__ import annotations

from typing import Iterable, Union

UNET_PREFIX = "diffusion_model."
CHECKPOINT_PREFIX = "model."  # a single-file checkpoint's prefix of the diffusion model

# A LoRA layer's target: a parameter name, `(name, (dim, offset, size))`, or `(name, None, fn)`.
Target = Union[str, tuple]


def target_name(target: Target) -> str:
    """The parameter a target patches (the whole tensor's name for a slice)."""
    return target if isinstance(target, str) else target[0]


def native_key_map(names: Iterable[str]) -> dict[str, Target]:
    """ComfyUI's generic names for every tensor under `diffusion_model.`: a weight by its module
    path (`diffusion_model.x.y`, `model.diffusion_model.x.y`) and kohya's `lora_unet_x_y`; any
    other tensor (bias, norm scale, buffer) by its full name."""
    key_map: dict[str, Target] = {}
    for name in names:
        if name.endswith(".weight"):
            module = name[: -len(".weight")]
            key_map["lora_unet_" + module[len(UNET_PREFIX):].replace(".", "_")] = name
            key_map[module] = name
            key_map[CHECKPOINT_PREFIX + module] = name
        else:
            key_map[name] = name
            key_map[CHECKPOINT_PREFIX + name] = name
    return key_map


def add_diffusers_names(key_map: dict[str, Target], diffusers: dict[str, Target], present: set[str],
                        dotted_prefixes: tuple[str, ...], underscored_prefixes: tuple[str, ...]) -> None:
    """Add the LoRA names of every diffusers `.weight` whose target the module has."""
    for diffusers_key, target in diffusers.items():
        if not diffusers_key.endswith(".weight") or target_name(target) not in present:
            continue
        layer = diffusers_key[: -len(".weight")]
        for prefix in dotted_prefixes:
            key_map[prefix + layer] = target
        for prefix in underscored_prefixes:
            key_map[prefix + layer.replace(".", "_")] = target
