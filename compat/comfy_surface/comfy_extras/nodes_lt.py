"""ComfyUI's `comfy_extras.nodes_lt`: the LTX-Video nodes' facades plus the module-level helpers
packs call (`get_noise_mask`, `get_keyframe_idxs`, `conditioning_get_any_value`, `preprocess`,
`_append_guide_attention_entry`;
compat/ldm_lightricks.py over nodes/ltxv_nodes.py)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
_A = "compat.ldm_lightricks:"
facade(__name__, {**{name: _A + name for name in ("get_noise_mask", "get_keyframe_idxs", "conditioning_get_any_value",
                                                   "preprocess")},
                  "_append_guide_attention_entry": _A + "append_guide_attention_entry"})
