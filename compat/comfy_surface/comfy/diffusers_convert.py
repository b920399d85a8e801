"""ComfyUI's `comfy.diffusers_convert` for node packs (compat/files_convert.py)."""
from compat.facade import facade

facade(__name__, {name: f"compat.files_convert:{name}" for name in (
    "convert_unet_state_dict", "convert_vae_state_dict", "convert_text_enc_state_dict",
    "convert_text_enc_state_dict_v20")})
