"""HiDream key layouts and LoRA spellings.

The transformer's tensor names are the same in ComfyUI's files, HiDream.ai's release and
diffusers' `HiDreamImageTransformer2DModel` (`double_stream_blocks.N.block.attn1.to_q`,
`ff_i.experts.K.w1`, `ff_i.gate.weight`, `caption_projection.N.linear`, `t_embedder.
timestep_embedder.linear_1`, ...): only the prefix differs (none in a split file or diffusers'
`transformer/`, `model.diffusion_model.` in a single file), so there is no conversion.

`lora_key_map(names)`: ComfyUI's generic spellings (`diffusion_model.<path>`, kohya's
`lora_unet_<path_with_underscores>`) and the diffusers / PEFT / ai-toolkit / SimpleTuner forms
whose layer names are the same paths (`transformer.<path>`, `diffusion_model.<path>`, `<path>`),
SimpleTuner's LyCORIS `lycoris_<path_with_underscores>` and OneTrainer's
`lora_transformer_<path_with_underscores>`.
"""
from __future__ import annotations

from typing import Any


def lora_key_map(names: list[str]) -> dict[str, Any]:
    """LoRA layer name -> the state-dict name under `diffusion_model.` it patches, for the HiDream
    network whose names under `diffusion_model.` are `names`."""
    from comfy_core.families.lora_keys import UNET_PREFIX, add_diffusers_names, native_key_map

    key_map = native_key_map(names)
    same = {name[len(UNET_PREFIX):]: name for name in names if name.startswith(UNET_PREFIX)}
    add_diffusers_names(key_map, same, set(names), ("transformer.", "diffusion_model.", ""),
                        ("lycoris_", "lora_transformer_", "lora_unet_"))
    return key_map
