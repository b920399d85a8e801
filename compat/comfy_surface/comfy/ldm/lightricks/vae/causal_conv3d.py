"""ComfyUI's `comfy.ldm.lightricks.vae.causal_conv3d`: the VAE's causal 3-D convolution."""
from compat.facade import facade

facade(__name__, {"CausalConv3d": "comfy_core.models.ltxv_vae:CausalConv3d"})
