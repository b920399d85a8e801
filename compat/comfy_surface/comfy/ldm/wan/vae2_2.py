"""ComfyUI's `comfy.ldm.wan.vae2_2` for node packs: the Wan 2.2 VAE's blocks
(`comfy_core.models.wan_vae22`, the shared ones from `wan_vae_blocks`) under ComfyUI's names."""
from compat.facade import facade

_V = "comfy_core.models.wan_vae22:"
_B = "comfy_core.models.wan_vae_blocks:"
facade(__name__, {
    "WanVAE": "comfy_core.models.wan_vae:WanVAE", "AvgDown3D": _V + "AvgDown3D", "DupUp3D": _V + "DupUp3D",
    "Down_ResidualBlock": _V + "DownResidualBlock", "Up_ResidualBlock": _V + "UpResidualBlock",
    "CausalConv3d": _B + "CausalConv3d", "RMS_norm": _B + "RMSNorm", "ResidualBlock": _B + "ResidualBlock",
    "AttentionBlock": _B + "AttentionBlock", "Resample": _B + "Resample", "patchify": _B + "patchify",
    "unpatchify": _B + "unpatchify",
})
