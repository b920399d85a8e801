"""ComfyUI's `comfy.ldm.modules.ema` for node packs: `LitEma`, latent-diffusion's parameter EMA
(compat/ldm_ema.py)."""
from compat.facade import facade

facade(__name__, {"LitEma": "compat.ldm_ema:LitEma"})
