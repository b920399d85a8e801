"""ComfyUI's `comfy_extras.nodes_perpneg`: its nodes' facades (PerpNeg, PerpNegGuider) plus the
GUIDER class `Guider_PerpNeg` packs subclass and the `perp_neg` combination
(compat/perp_neg_api.py)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {"Guider_PerpNeg": "compat.perp_neg_api:Guider_PerpNeg",
                  "perp_neg": "compat.perp_neg_api:perp_neg"})
