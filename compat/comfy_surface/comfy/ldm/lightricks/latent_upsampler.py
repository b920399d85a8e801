"""ComfyUI's `comfy.ldm.lightricks.latent_upsampler` for node packs: `LatentUpsampler` (with
`from_config`) over our LTX latent upsampler (compat/latent_upsamplers_api.py)."""
from compat.facade import facade

facade(__name__, {"LatentUpsampler": "compat.latent_upsamplers_api:LatentUpsampler"})
