"""The option names of the image maths, importable without torch (the nodes declare their combos
with them while /object_info renders; the implementations key their functions by them).
Orders are ComfyUI 0.3.64's."""
from __future__ import annotations

# comfy_core.image.blend.MODES
BLEND_MODES = ["normal", "multiply", "screen", "overlay", "soft_light", "difference"]
# comfy_core.image.porter_duff.RULES (alphabetical, as ComfyUI's PorterDuffMode enum)
PORTER_DUFF_MODES = ["ADD", "CLEAR", "DARKEN", "DST", "DST_ATOP", "DST_IN", "DST_OUT", "DST_OVER", "LIGHTEN",
                     "MULTIPLY", "OVERLAY", "SCREEN", "SRC", "SRC_ATOP", "SRC_IN", "SRC_OUT", "SRC_OVER", "XOR"]
# comfy_core.image.morphology.OPERATIONS
MORPHOLOGY_OPERATIONS = ["erode", "dilate", "open", "close", "gradient", "bottom_hat", "top_hat"]
# ImageQuantize: "bayer-N" is comfy_core.image.dither of order N; the others are Pillow's.
DITHER_MODES = ["none", "floyd-steinberg", "bayer-2", "bayer-4", "bayer-8", "bayer-16"]
