"""Qwen-Image key layouts and LoRA spellings.

The transformer's tensor names are the same in ComfyUI's files, Qwen's original release and
diffusers' `QwenImageTransformer2DModel` (`transformer_blocks.N.attn.to_q`, `img_mlp.net.0.proj`,
`time_text_embed.timestep_embedder.linear_1`, ...): only the prefix differs (none in a split
file, `model.diffusion_model.` in a single file), so there is no conversion. Edit-2511 files add
an empty `__index_timestep_zero__` marker, which selects the reference method and is not a weight.

`lora_key_map(names)`: every spelling ComfyUI reads for this model (comfy/lora.py's QwenImage
branch: the bare module path, `transformer.<path>`, SimpleTuner's `lycoris_<path_with_underscores>`)
plus the generic ones (`diffusion_model.<path>`, kohya's / musubi-tuner's
`lora_unet_<path_with_underscores>`) and the diffusers / PEFT / DiffSynth / ai-toolkit forms whose
layer names are the same paths (`transformer.<path>`, `diffusion_model.<path>`, `<path>`) and
OneTrainer's `lora_transformer_<path_with_underscores>`.
"""
from __future__ import annotations

from typing import Any


def lora_key_map(names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> the state-dict name under `diffusion_model.` it patches, for the
    Qwen-Image network whose names under `diffusion_model.` are `names`."""
    from comfy_core.families.lora_keys import UNET_PREFIX, add_diffusers_names, native_key_map

    key_map = native_key_map(names)
    # diffusers' names are ours: the identity map over the weights present.
    same = {name[len(UNET_PREFIX):]: name for name in names if name.startswith(UNET_PREFIX)}
    add_diffusers_names(key_map, same, set(names), ("transformer.", "diffusion_model.", ""),
                        ("lycoris_", "lora_transformer_", "lora_unet_"))
    return key_map
