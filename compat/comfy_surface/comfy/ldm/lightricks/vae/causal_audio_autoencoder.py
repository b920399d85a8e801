"""ComfyUI's `comfy.ldm.lightricks.vae.causal_audio_autoencoder` for node packs: the audio VAE's
autoencoder and blocks (`comfy_core.models.ltx_audio_vae`) under ComfyUI's names."""
from compat.facade import facade

_A = "comfy_core.models.ltx_audio_vae:"
facade(__name__, {name: _A + name for name in ("CausalAudioAutoencoder", "Encoder", "Decoder", "ResnetBlock",
                                               "AttnBlock", "Upsample", "Downsample", "CausalConv2d")}
       | {"processor": _A + "LatentStatistics"})
