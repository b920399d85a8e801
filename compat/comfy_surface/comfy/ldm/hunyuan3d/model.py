"""ComfyUI's `comfy.ldm.hunyuan3d.model` for node packs: the Hunyuan3D 2.0 (and mini) DiT
(`comfy_core.families.hunyuan3d.dit`), so a pack's `isinstance(network,
comfy.ldm.hunyuan3d.model.Hunyuan3Dv2)` reaches ours. The constructor is ours (built from a config
by our loaders)."""
from compat.facade import facade

facade(__name__, {"Hunyuan3Dv2": "comfy_core.families.hunyuan3d.dit:Hunyuan3Dv2DiT"})
