"""Qwen-Image 2.1 key layouts and LoRA spellings.

The transformer's tensor names are diffusers' `QwenImage21Transformer2DModel` names in ComfyUI's
files too (`transformer_blocks.N.attn.to_q`, `txt_in.text_norm`, `modulation.1`, ...), except the
SwiGLU, whose gate and up projections ComfyUI's files fuse in `img_mlp.gate_up` (diffusers:
`img_mlp.gate_layer` and `img_mlp.proj`); the network takes either (dit.py), so there is no
conversion. Only the prefix differs (none in a split file, `model.diffusion_model.` in a single one).

`lora_key_map(names)`: the native spellings (`diffusion_model.<path>`, kohya's
`lora_unet_<path_with_underscores>`) and the diffusers / PEFT forms whose layer names are the same
paths (`transformer.<path>`, `diffusion_model.<path>`, `<path>`), as for Qwen-Image.
"""
from __future__ import annotations

from typing import Any


def lora_key_map(names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> the state-dict name under `diffusion_model.` it patches, for the
    Qwen-Image 2.1 network whose names under `diffusion_model.` are `names`."""
    from comfy_core.families.lora_keys import UNET_PREFIX, add_diffusers_names, native_key_map

    key_map = native_key_map(names)
    same = {name[len(UNET_PREFIX):]: name for name in names if name.startswith(UNET_PREFIX)}
    add_diffusers_names(key_map, same, set(names), ("transformer.", "diffusion_model.", ""),
                        ("lycoris_", "lora_transformer_", "lora_unet_"))
    return key_map
