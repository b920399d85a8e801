"""ComfyUI's `comfy.model_detection` for node packs (compat/mp_detection.py): UNet config
detection from state-dict names and shapes, for the SD families this engine loads."""
from compat.facade import facade

facade(__name__, {name: f"compat.mp_detection:{name}" for name in (
    "count_blocks", "detect_unet_config", "model_config_from_unet_config", "model_config_from_unet",
    "unet_prefix_from_state_dict", "convert_config", "unet_config_from_diffusers_unet")})
