"""ComfyUI's `comfy.ldm.hunyuan3d.vae` for node packs: Hunyuan3D's ShapeVAE decoder
(`comfy_core.families.hunyuan3d.shape_vae`; latent to occupancy grid). ComfyUI's encoder and its
point-cloud samplers are not provided (ComfyUI cannot run the encoder either)."""
from compat.facade import facade

facade(__name__, {"ShapeVAE": "comfy_core.families.hunyuan3d.shape_vae:ShapeVAE"})
