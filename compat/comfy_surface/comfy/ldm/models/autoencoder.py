"""ComfyUI's `comfy.ldm.models.autoencoder` for node packs: our KL autoencoder."""
from compat.facade import facade

facade(__name__, {
    "AutoencoderKL": "comfy_core.models.vae:AutoencoderKL",
})
