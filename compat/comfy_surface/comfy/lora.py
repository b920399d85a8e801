"""ComfyUI's `comfy.lora` for node packs (compat/lora_api.py)."""
from compat.facade import facade, point

facade(__name__, {
    "load_lora": "compat.lora_api:load_lora",
    "model_lora_keys_unet": "compat.lora_api:model_lora_keys_unet",
    "model_lora_keys_clip": "compat.lora_api:model_lora_keys_clip",
    "calculate_weight": point("calculate_weight", "comfy_core.weights.entries:apply_patches"),
    "weight_decompose": "compat.lora_api:weight_decompose",
    "pad_tensor_to_shape": "compat.lora_api:pad_tensor_to_shape",
    "LORA_CLIP_MAP": "compat.lora_api:LORA_CLIP_MAP",
})
