"""ComfyUI's `node_helpers` for node packs (compat/helpers.py)."""
from compat.helpers import conditioning_set_values, hasher, pillow, string_to_torch_dtype
