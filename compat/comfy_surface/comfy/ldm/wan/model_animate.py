"""ComfyUI's `comfy.ldm.wan.model_animate` for node packs: Wan 2.2 Animate's network
(`comfy_core.families.wan.animate`) and its parts under ComfyUI's names, so a pack's
`isinstance(network, comfy.ldm.wan.model_animate.AnimateWanModel)` reaches ours."""
from compat.facade import facade

_A = "comfy_core.families.wan.animate:"
facade(__name__, {name: _A + name for name in ("AnimateWanModel", "FaceEncoder", "FaceAdapter", "FaceBlock",
                                               "CausalConv1d", "EqualConv2d", "EqualLinear", "Blur", "ResBlock")})
