"""ComfyUI's `comfy.latent_formats` for node packs (comfy_core/models/latent_formats.py, and each
family package's `latent_format.py`): the formats of our families, constructible without arguments
as ComfyUI's."""
from compat.facade import facade

facade(__name__, {"LatentFormat": "comfy_core.models.latent_formats:LatentFormat",
                  "SD15": "comfy_core.models.latent_formats:SD15",
                  "SDXL": "comfy_core.families.sdxl.latent_format:SDXL",
                  "SD3": "comfy_core.families.sd3.latent_format:SD3",
                  "Flux": "comfy_core.families.flux.latent_format:FluxLatentFormat",
                  **{name: f"comfy_core.families.wan.latent_format:{name}" for name in ("Wan21", "Wan22")},
                  "LTXV": "comfy_core.families.ltxv.latent_format:LTXV",
                  "LTXAV": "comfy_core.families.ltx2.latent_format:LTXAV",
                  "ACEAudio": "comfy_core.families.ace_step.latent_format:ACEAudio"})
