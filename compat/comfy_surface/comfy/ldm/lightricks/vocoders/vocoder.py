"""ComfyUI's `comfy.ldm.lightricks.vocoders.vocoder` for node packs: LTX-2's HiFi-GAN / BigVGAN v2
vocoder and LTX-2.3's bandwidth-extending one (`comfy_core.models.ltx_vocoder`)."""
from compat.facade import facade

_V = "comfy_core.models.ltx_vocoder:"
facade(__name__, {name: _V + name for name in ("Vocoder", "VocoderWithBWE", "ResBlock1", "ResBlock2", "AMPBlock1",
                                               "Snake", "UpSample1d", "DownSample1d", "Activation1d", "MelSTFT",
                                               "LowPassFilter1d")}
       | {"SnakeBeta": _V + "Snake", "kaiser_sinc_filter1d": _V + "kaiser_sinc_filter"})
