"""ComfyUI's `comfy.lora` for node packs (comfy_core/lora/patch_dicts.py)."""
from compat.facade import facade

facade(__name__, {
    "load_lora": "comfy_core.lora.patch_dicts:load_lora",
    "model_lora_keys_unet": "comfy_core.lora.patch_dicts:model_lora_keys_unet",
    "model_lora_keys_clip": "comfy_core.lora.patch_dicts:model_lora_keys_clip",
    "calculate_weight": "comfy_core.lora.patch_dicts:calculate_weight",
    "weight_decompose": "comfy_core.lora.patch_dicts:weight_decompose",
    "pad_tensor_to_shape": "comfy_core.lora.patch_dicts:pad_tensor_to_shape",
    "LORA_CLIP_MAP": "comfy_core.lora.patch_dicts:LORA_CLIP_MAP",
})
