"""ComfyUI's `comfy.ldm.modules.diffusionmodules.model` for node packs: our VAE's blocks."""
from compat.facade import facade

_V = "comfy_core.models.vae:"
facade(__name__, {
    "ResnetBlock": _V + "VAEResBlock",
    "AttnBlock": _V + "AttnBlock",
    "Encoder": _V + "Encoder",
    "Decoder": _V + "Decoder",
    "Normalize": "compat.ldm_util:normalize_vae",
    "nonlinearity": "compat.ldm_util:nonlinearity",
    "vae_attention": "compat.ldm_util:vae_attention",
    "ops": "compat.ldm_ops:disable_weight_init",
})
