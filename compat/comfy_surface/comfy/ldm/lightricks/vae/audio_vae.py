"""ComfyUI's `comfy.ldm.lightricks.vae.audio_vae` for node packs: LTX-2's audio VAE
(`comfy_core.models.ltx_audio_vae`; ComfyUI's `AudioVAE(metadata)` is `LTXAudioVAE`, its
`CausalAudioAutoencoder` the module of that name) and the latent's time / frequency factor."""
from compat.facade import facade

_A = "comfy_core.models.ltx_audio_vae:"
facade(__name__, {"AudioVAE": _A + "LTXAudioVAE", "CausalAudioAutoencoder": _A + "CausalAudioAutoencoder",
                  "LATENT_DOWNSAMPLE_FACTOR": _A + "LATENT_DOWNSAMPLE_FACTOR",
                  "Vocoder": "comfy_core.models.ltx_vocoder:Vocoder",
                  "VocoderWithBWE": "comfy_core.models.ltx_vocoder:VocoderWithBWE"})
