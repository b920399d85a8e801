"""Anima LoRA spellings.

The network's names are ComfyUI's, the original release's without its `net.` prefix
(`blocks.N.self_attn.q_proj`, `llm_adapter.blocks.N.cross_attn.o_proj`, ...). `lora_key_map(names)`:
ComfyUI's generic names (`diffusion_model.<path>`, kohya's / musubi-tuner's
`lora_unet_<path_with_underscores>`) plus the `net.<path>`, `transformer.<path>` and bare
`<path>` forms trainers write for this model (diffusion-pipe's turbo LoRA uses
`diffusion_model.<path>.lora_A / lora_B`).
"""
from __future__ import annotations

from typing import Any


def lora_key_map(names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> the state-dict name under `diffusion_model.` it patches, for the Anima
    network whose names under `diffusion_model.` are `names`."""
    from comfy_core.families.lora_keys import UNET_PREFIX, add_diffusers_names, native_key_map

    key_map = native_key_map(names)
    same = {name[len(UNET_PREFIX):]: name for name in names if name.startswith(UNET_PREFIX)}
    add_diffusers_names(key_map, same, set(names), ("net.", "transformer.", "diffusion_model.", ""),
                        ("lora_transformer_", "lora_unet_"))
    return key_map
