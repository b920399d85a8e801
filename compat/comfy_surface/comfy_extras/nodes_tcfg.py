"""ComfyUI's `comfy_extras.nodes_tcfg`: the TCFG node's facade plus `score_tangential_damping(
cond_score, uncond_score)`, the TCFG node's own function (comfy_core.sampling.cfg_patches)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {"score_tangential_damping": "comfy_core.sampling.cfg_patches:score_tangential_damping"})
