"""ComfyUI's `comfy.ldm.pixeldit.model` for node packs: `PixDiT_T2I` is our PixelDiT network
(`comfy_core.families.pixeldit.dit.PixelDiT`, also the base of our PiD network), so a pack's
`isinstance(diffusion_model, PixDiT_T2I)` sees ours; it is built by our loaders, from the weights."""
from compat.facade import facade

facade(__name__, {"PixDiT_T2I": "comfy_core.families.pixeldit.dit:PixelDiT"})
