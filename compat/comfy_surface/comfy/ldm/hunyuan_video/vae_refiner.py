"""ComfyUI's `comfy.ldm.hunyuan_video.vae_refiner` for node packs: the causal video VAE ComfyUI runs for
HunyuanVideo 1.5, ours in `comfy_core.models.hunyuan_video15_vae` (its `Encoder`, `Decoder` and the
RMS norm ComfyUI calls `RMS_norm`)."""
from compat.facade import facade

_M = "comfy_core.models.hunyuan_video15_vae:"
facade(__name__, {
    **{name: _M + name for name in ("Encoder", "Decoder")},
    "RMS_norm": _M + "RMSNorm",
    "DnSmpl": _M + "Downsample",
    "UpSmpl": _M + "Upsample",
})
