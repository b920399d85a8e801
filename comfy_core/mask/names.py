"""The option names of the mask maths, importable without torch (see comfy_core.image.names)."""
from __future__ import annotations

# comfy_core.mask.ops.COMBINE, in ComfyUI 0.3.64's order
COMBINE_OPERATIONS = ["multiply", "add", "subtract", "and", "or", "xor"]
