"""ComfyUI's `comfy.ldm.hunyuan_video.upsampler` for node packs: `HunyuanVideo15SRModel` over our
HunyuanVideo 1.5 latent upsamplers (compat/latent_upsamplers_api.py)."""
from compat.facade import facade

facade(__name__, {"HunyuanVideo15SRModel": "compat.latent_upsamplers_api:HunyuanVideo15SRModel"})
