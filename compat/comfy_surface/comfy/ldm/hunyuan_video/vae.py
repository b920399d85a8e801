"""ComfyUI's `comfy.ldm.hunyuan_video.vae` for node packs: the 2-D encoder / decoder ComfyUI keeps here
(HunyuanImage 2.1's VAE) is not a family of this engine; the VAE of HunyuanVideo 1.0 is
`comfy_core.models.hunyuan_video_vae`, whose `Encoder` / `Decoder` these names reach."""
from compat.facade import facade

_M = "comfy_core.models.hunyuan_video_vae:"
facade(__name__, {name: _M + name for name in ("Encoder", "Decoder")})
