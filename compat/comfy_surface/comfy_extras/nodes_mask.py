"""ComfyUI's `comfy_extras.nodes_mask`: its nodes' facades plus `composite`, the masked paste
Impact-Pack calls directly (compat/extras_helpers.py)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {"composite": "compat.extras_helpers:composite"})
