"""ComfyUI's `comfy.pixel_space_convert` for node packs: the identity "VAE" of pixel-space models
(Chroma Radiance), ours in `comfy_core.models.pixel_space_vae`."""
from compat.facade import facade

facade(__name__, {"PixelspaceConversionVAE": "comfy_core.models.pixel_space_vae:PixelSpaceVAE"})
