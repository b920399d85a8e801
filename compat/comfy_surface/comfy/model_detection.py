"""ComfyUI's `comfy.model_detection` for node packs (compat/mp_detection.py): diffusion-model config
detection from state-dict names and shapes, for the SD UNets and the SD3 (MMDiT) / Flux
transformers this engine loads, and the diffusers -> SAI / BFL conversion of SD3 and Flux.
`model_config_from_diffusers_unet` reads `unet_config_from_diffusers_unet` and `supported_models.models`
at call time, so a pack replacing them (Kolors-MZ) is what answers."""
from compat.facade import facade

facade(__name__, {name: f"compat.mp_detection:{name}" for name in (
    "count_blocks", "detect_unet_config", "model_config_from_unet_config", "model_config_from_unet",
    "unet_prefix_from_state_dict", "convert_config", "unet_config_from_diffusers_unet", "convert_diffusers_mmdit",
    "model_config_from_diffusers_unet")})
