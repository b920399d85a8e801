"""ComfyUI's `comfy.ldm.lightricks.vae.causal_video_autoencoder` for node packs: the LTX-Video VAE
(`comfy_core.models.ltxv_vae`; ComfyUI's `VideoVAE` is `LTXVVAE`, built from a config read from the
weights) and its blocks under ComfyUI's names, so a pack's isinstance walk over a loaded VAE
reaches ours."""
from compat.facade import facade

_V = "comfy_core.models.ltxv_vae:"
facade(__name__, {
    **{name: _V + name for name in ("Encoder", "Decoder", "ResnetBlock3D", "SpaceToDepthDownsample",
                                    "DepthToSpaceUpsample")},
    "VideoVAE": _V + "LTXVVAE", "UNetMidBlock3D": _V + "MidBlock3D", "processor": _V + "PerChannelStatistics",
    "patchify": "compat.ldm_lightricks:patchify", "unpatchify": "compat.ldm_lightricks:unpatchify",
})
