"""ComfyUI's `comfy.ldm.audio.autoencoder` for node packs: Stable Audio's Oobleck VAE
(`comfy_core.models.oobleck_vae`); `AudioOobleckVAE` is our `OobleckVAE`."""
from compat.facade import facade

_M = "comfy_core.models.oobleck_vae:"
facade(__name__, {
    "AudioOobleckVAE": _M + "OobleckVAE",
    **{name: _M + name for name in ("OobleckEncoder", "OobleckDecoder", "ResidualUnit", "SnakeBeta", "WNConv1d")},
})
