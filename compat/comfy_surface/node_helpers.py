"""ComfyUI's `node_helpers` for node packs (compat/helpers.py)."""
from compat.facade import facade

facade(__name__, {name: f"compat.helpers:{name}" for name in (
    "conditioning_set_values", "pillow", "hasher", "string_to_torch_dtype", "image_alpha_fix")})
