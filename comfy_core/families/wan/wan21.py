"""Wan 2.1 text-to-video (1.3 B and 14 B) and Wan 2.2 A14B text-to-video (its high- and low-noise
experts have the 2.1 14 B layout): ComfyUI's `supported_models.WAN21_T2V` (model_base.WAN21).

Detected from the DiT's names and shapes (comfy_core/families/wan/dit.py): `head.modulation` and
`patch_embedding` with 16 input and 16 output channels, no `img_emb`, VACE or camera modules.
Widths and depth from the weights (1.3 B: dim 1536, 30 blocks; 14 B: dim 5120, 40 blocks)."""
from __future__ import annotations

from comfy_core.families.base import Family
from comfy_core.families.wan import wan_family
from comfy_core.families.wan.conditions import WanConditions


def definition() -> Family:
    return wan_family("wan21_t2v", "Wan 2.1 text-to-video", (("variant", "t2v"),),
                      WanConditions("wan21", image_to_video=False))
