"""ComfyUI's `comfy_extras.nodes_lt`: the LTX-Video nodes' facades plus the module-level helpers
packs call (`get_noise_mask`, `get_keyframe_idxs`, `conditioning_get_any_value`, `preprocess`,
`_append_guide_attention_entry`; compat/ldm_lightricks.py over nodes/ltxv_nodes.py), and
`LTXVAddGuide`'s class methods packs place their own guides with (`get_latent_index`,
`add_keyframe_index`, `append_keyframe`, `dilate_latent`, `get_reference_downscale_factor`,
`attach_guide_latent`; compat/ltxv_guides.py)."""
from compat.extras_modules import export_nodes
from compat.facade import facade
from compat.ltxv_guides import install as _install_guide_methods

_classes = export_nodes(globals(), __name__)
if "LTXVAddGuide" in _classes:
    _install_guide_methods(_classes["LTXVAddGuide"])
_A = "compat.ldm_lightricks:"
facade(__name__, {**{name: _A + name for name in ("get_noise_mask", "get_keyframe_idxs", "conditioning_get_any_value",
                                                   "preprocess")},
                  "_append_guide_attention_entry": _A + "append_guide_attention_entry"})
