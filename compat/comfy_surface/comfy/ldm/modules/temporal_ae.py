"""ComfyUI's `comfy.ldm.modules.temporal_ae` for node packs: Stable Video Diffusion's temporal VAE
decoder (`comfy_core.models.video_vae`); `VideoResBlock` is our `VideoVAEResBlock`."""
from compat.facade import facade

_M = "comfy_core.models.video_vae:"
facade(__name__, {
    "VideoDecoder": "compat.ldm_autoencoder:VideoDecoder",  # ComfyUI's keyword arguments, over ours
    "AE3DConv": _M + "AE3DConv",
    "VideoResBlock": _M + "VideoVAEResBlock",
})
