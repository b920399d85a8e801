"""ComfyUI's `comfy.latent_formats` for node packs (comfy_core/models/latent_formats.py, and each
family package's `latent_format.py`): the formats of our families, constructible without arguments
as ComfyUI's, under today's ComfyUI class names.

Ours are frozen dataclasses with ComfyUI's attribute names (`latent_channels`, `scale_factor`,
`latent_rgb_factors`, ...). Packs that set a class attribute (`comfy.latent_formats.HunyuanVideo.
latent_channels = 16`, HunyuanVideoWrapper and FramePackWrapper) set it on our class, as they do on
ComfyUI's. Where ComfyUI's classes are siblings and ours subclass one another (Hunyuan3Dv2mini and
Hunyuan3Dv2_1 are Hunyuan3Dv2 subclasses here) `isinstance` with the parent is true for both.

`vars(comfy.latent_formats)` (and its `__dict__`) lists every format once torch is loaded, as
ComfyUI's module, whose classes all exist after its import, does (VAE-Utils builds its table of
formats from `vars()`): names here resolve on first read, to keep the import torch-free, and the
dictionary asked for as a whole reads them all first (compat/facade.py `listed`)."""
from compat.facade import facade
from compat.facade import listed as _listed

_F = "comfy_core.families."
facade(__name__, {"LatentFormat": "comfy_core.models.latent_formats:LatentFormat",
                  "SD15": "comfy_core.models.latent_formats:SD15",
                  "SDXL": _F + "sdxl.latent_format:SDXL",
                  "SD3": _F + "sd3.latent_format:SD3",
                  "Flux": _F + "flux.latent_format:FluxLatentFormat",
                  "Flux2": _F + "flux2.latent_format:Flux2LatentFormat",
                  "ChromaRadiance": _F + "chroma.latent_format:ChromaRadianceLatentFormat",
                  "HiDreamO1Pixel": _F + "hidream_o1.latent_format:HiDreamO1PixelLatentFormat",
                  **{name: _F + f"wan.latent_format:{name}" for name in ("Wan21", "Wan22")},
                  "LTXV": _F + "ltxv.latent_format:LTXV",
                  "LTXAV": _F + "ltx2.latent_format:LTXAV",
                  "HunyuanVideo": _F + "kandinsky5.latent_format:HunyuanVideo",  # HunyuanVideo 1.0 / Kandinsky 5
                  "HunyuanVideo15": _F + "hunyuan_video15.latent_format:HunyuanVideo15",
                  **{name: _F + f"hunyuan3d.latent_format:{name}"
                     for name in ("Hunyuan3Dv2", "Hunyuan3Dv2mini", "Hunyuan3Dv2_1")},
                  "CogVideoX": _F + "cogvideox.latent_format:CogVideoX",
                  "QwenImage21": _F + "qwen_image21.latent_format:QwenImage21LatentFormat",
                  "SeedVR2": _F + "seedvr2.latent_format:SeedVR2LatentFormat",
                  "MiniMaxH3AV": _F + "minimax_h3.latent_format:MiniMaxH3AV",
                  "MiniMaxMusic3": _F + "minimax_music3.latent_format:MiniMaxMusic3Latent",
                  **{name: _F + f"stable_audio.latent_format:{name}" for name in ("StableAudio1", "StableAudio3")},
                  "ACEAudio": _F + "ace_step.latent_format:ACEAudio",
                  "ACEAudio15": _F + "ace_step15.latent_format:ACEAudio15",
                  # formats of families not implemented here, as data (compat/latent_formats_other.py)
                  **{name: f"compat.latent_formats_other:{name}"
                     for name in ("Mochi", "Cosmos1CV8x8x8", "SDXL_Playground_2_5")}})
_listed(__name__)
