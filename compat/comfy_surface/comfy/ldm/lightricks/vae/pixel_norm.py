"""ComfyUI's `comfy.ldm.lightricks.vae.pixel_norm`: the VAE's per-position channel normalisation."""
from compat.facade import facade

facade(__name__, {"PixelNorm": "compat.ldm_lightricks:PixelNorm"})
