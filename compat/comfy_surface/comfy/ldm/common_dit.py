"""ComfyUI's `comfy.ldm.common_dit` for node packs: the DiT helpers `pad_to_patch_size` (circular
padding up to a multiple of the patch, comfy_core/families/sd3/mmdit_blocks.py) and `rms_norm(x,
weight=None, eps=1e-6)` (compat/ldm_mmdit.py; KJNodes' LTXV nodes call it)."""
from compat.facade import facade

facade(__name__, {
    "pad_to_patch_size": "comfy_core.families.sd3.mmdit_blocks:pad_to_patch_size",
    "rms_norm": "compat.ldm_mmdit:rms_norm",
})
