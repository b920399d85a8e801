"""ComfyUI's `comfy_extras.nodes_sag`: the SelfAttentionGuidance node's facade plus the module's
helpers packs call or replace (compat/sag_api.py)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {name: f"compat.sag_api:{name}" for name in (
    "attention_basic_with_sim", "create_blur_map", "gaussian_blur_2d")})
