"""ComfyUI's `comfy.ldm.modules.diffusionmodules.model` for node packs: our VAE's blocks; `Encoder` /
`Decoder` take ComfyUI's keyword arguments (`instantiate_from_config` targets, compat/ldm_autoencoder.py)
and `isinstance` also holds for our networks' own encoder / decoder."""
from compat.facade import facade

_V = "comfy_core.models.vae:"
facade(__name__, {
    "ResnetBlock": _V + "VAEResBlock",
    "AttnBlock": _V + "AttnBlock",
    "Encoder": "compat.ldm_autoencoder:Encoder",
    "Decoder": "compat.ldm_autoencoder:Decoder",
    "Normalize": "compat.ldm_util:normalize_vae",
    "nonlinearity": "compat.ldm_util:nonlinearity",
    "vae_attention": "compat.ldm_util:vae_attention",
    "ops": "compat.ldm_ops:disable_weight_init",
})
