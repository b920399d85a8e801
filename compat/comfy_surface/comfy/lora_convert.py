"""ComfyUI's `comfy.lora_convert` for node packs (compat/lora_api.py)."""
from compat.facade import facade

facade(__name__, {"convert_lora": "compat.lora_api:convert_lora"})
