"""ComfyUI's `comfy.ldm.lightricks.symmetric_patchifier` for node packs: the latent <-> token
patchifier and `latent_to_pixel_coords` (the DiT's own, comfy_core/families/ltxv/dit.py)."""
from compat.facade import facade

facade(__name__, {"Patchifier": "compat.ldm_lightricks:Patchifier",
                  "SymmetricPatchifier": "compat.ldm_lightricks:SymmetricPatchifier",
                  "latent_to_pixel_coords": "comfy_core.families.ltxv.dit:latent_to_pixel_coords"})
