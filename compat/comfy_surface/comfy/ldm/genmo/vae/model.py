"""ComfyUI's `comfy.ldm.genmo.vae.model` (Mochi's video VAE, not implemented here: stand-ins;
compat/ldm_genmo.py)."""
from compat.facade import facade

facade(__name__, {name: "compat.ldm_genmo:" + name for name in (
    "VideoVAE", "Encoder", "Decoder", "LatentDistribution")})
