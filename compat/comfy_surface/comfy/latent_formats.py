"""ComfyUI's `comfy.latent_formats` for node packs (comfy_core/models/latent_formats.py): the
formats of our families, constructible without arguments as ComfyUI's."""
from compat.facade import facade

facade(__name__, {name: f"comfy_core.models.latent_formats:{name}"
                  for name in ("LatentFormat", "SD15", "SDXL", "SD3", "Flux", "Wan21", "Wan22")})
