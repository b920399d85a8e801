"""ComfyUI's `comfy.ldm.hunyuan3dv2_1.hunyuandit` for node packs: the Hunyuan3D 2.1 DiT (U-ViT skips,
a mixture of experts in its last blocks; `comfy_core.families.hunyuan3d.dit21`) under ComfyUI's
name `HunYuanDiTPlain`. The constructor is ours (built from a config by our loaders)."""
from compat.facade import facade

facade(__name__, {"HunYuanDiTPlain": "comfy_core.families.hunyuan3d.dit21:Hunyuan3Dv21DiT"})
