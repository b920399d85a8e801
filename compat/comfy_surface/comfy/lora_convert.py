"""ComfyUI's `comfy.lora_convert` for node packs (comfy_core/lora/patch_dicts.py)."""
from compat.facade import facade

facade(__name__, {"convert_lora": "comfy_core.lora.patch_dicts:convert_lora"})
