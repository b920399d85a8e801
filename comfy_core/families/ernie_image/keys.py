"""ERNIE-Image's LoRA spellings. ComfyUI's and diffusers' module names are the same
(`layers.N.self_attention.to_q`, ...), so a LoRA names its targets either as ComfyUI's generic
forms (`diffusion_model.<module>`, kohya's `lora_unet_<module with _>`) or as diffusers' / PEFT's
`transformer.<module>` (our addition for diffusers-trained files: ComfyUI's lora.py has no
ERNIE-specific entry in the copies read)."""
from __future__ import annotations

from typing import Any, Iterable

from comfy_core.families.lora_keys import native_key_map

UNET_PREFIX = "diffusion_model."


def lora_key_map(names: Iterable[str]) -> dict[str, Any]:
    """LoRA layer name -> target tensor name, for the network's `names` (`diffusion_model.*`)."""
    names = list(names)
    key_map = native_key_map(names)
    for name in names:
        if name.startswith(UNET_PREFIX) and name.endswith(".weight"):
            key_map["transformer." + name[len(UNET_PREFIX):-len(".weight")]] = name
    return key_map


__all__ = ["lora_key_map"]
