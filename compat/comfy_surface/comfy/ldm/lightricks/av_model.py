"""ComfyUI's `comfy.ldm.lightricks.av_model` for node packs: the LTX-2 audio-video DiT
(`comfy_core.families.ltx2.dit`, whose class is named `LTXAVModel` as ComfyUI's) and its block,
so a pack's `from comfy.ldm.lightricks.av_model import LTXAVModel` and its
`diffusion_model.__class__.__name__ == "LTXAVModel"` / `isinstance` checks reach ours
(ComfyUI-LTXVideo). The constructor is ComfyUI's keyword config (`LTXAVModel(**unet_config,
dtype=, device=, operations=)`), as our loaders build it."""
from compat.facade import facade

_M = "comfy_core.families.ltx2.dit:"
facade(__name__, {name: _M + name for name in ("LTXAVModel", "BasicAVTransformerBlock")})
