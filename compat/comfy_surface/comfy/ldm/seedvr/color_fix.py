"""ComfyUI's `comfy.ldm.seedvr.color_fix` for node packs: SeedVR2's colour corrections
(`wavelet_color_transfer`, `adain_color_transfer`, `lab_color_transfer(content, reference,
luminance_weight=0.8)` on `[N, 3, H, W]` in -1..1) and their parts, ours
(comfy_core/families/seedvr2/color_fix.py)."""
from compat.facade import facade

facade(__name__, {name: "comfy_core.families.seedvr2.color_fix:" + name for name in (
    "wavelet_color_transfer", "adain_color_transfer", "lab_color_transfer", "wavelet_blur", "wavelet_split",
    "rgb_to_lab", "lab_to_rgb", "match_histogram")})
