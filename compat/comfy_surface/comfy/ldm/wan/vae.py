"""ComfyUI's `comfy.ldm.wan.vae` for node packs: the Wan 2.1 VAE (`comfy_core.models.wan_vae`)
and its blocks (`comfy_core.models.wan_vae_blocks`) under ComfyUI's names, so a pack's
`isinstance(layer, comfy.ldm.wan.vae.CausalConv3d)` / `RMS_norm` walk over a loaded VAE reaches
ours. The VAE is built from a config read from the weights (`WanVAEConfig`), not ComfyUI's keyword
arguments."""
from compat.facade import facade

_V = "comfy_core.models.wan_vae:"
_B = "comfy_core.models.wan_vae_blocks:"
facade(__name__, {
    "WanVAE": _V + "WanVAE", "Encoder3d": _V + "Encoder3d", "Decoder3d": _V + "Decoder3d",
    "CausalConv3d": _B + "CausalConv3d", "RMS_norm": _B + "RMSNorm", "ResidualBlock": _B + "ResidualBlock",
    "AttentionBlock": _B + "AttentionBlock", "Resample": _B + "Resample", "patchify": _B + "patchify",
    "unpatchify": _B + "unpatchify",
})
