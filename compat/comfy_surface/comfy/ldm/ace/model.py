"""ComfyUI's `comfy.ldm.ace.model` for node packs: the ACE-Step 1 linear-attention DiT
(`comfy_core.families.ace_step.dit`) and its final layer under ComfyUI's names. The constructors
are ours (built from a config by our loaders)."""
from compat.facade import facade

_M = "comfy_core.families.ace_step.dit:"
facade(__name__, {
    "ACEStepTransformer2DModel": _M + "AceStepTransformer",
    "T2IFinalLayer": _M + "FinalLayer",
})
