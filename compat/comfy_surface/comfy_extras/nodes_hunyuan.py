"""ComfyUI's `comfy_extras.nodes_hunyuan`: the HunyuanVideo nodes' facades plus the classes its
module imports that packs take from it, `HunyuanVideo15SRModel` (comfy/ldm/hunyuan_video/upsampler.py)
and `LatentUpsampler` (comfy/ldm/lightricks/latent_upsampler.py), over our latent upsamplers
(compat/latent_upsamplers_api.py)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {name: "compat.latent_upsamplers_api:" + name for name in ("HunyuanVideo15SRModel", "LatentUpsampler")})
