"""ComfyUI's `comfy.ldm.hunyuan_video.model` for node packs: the HunyuanVideo 1.0 DiT
(`comfy_core.families.hunyuan_video.dit`) under ComfyUI's name, so a pack's `isinstance(network,
comfy.ldm.hunyuan_video.model.HunyuanVideo)` or its `HunyuanVideoParams` reach ours.

ComfyUI builds HunyuanVideo 1.5 and HunyuanImage 2.1 from the same class; here HunyuanVideo 1.5 is
its own network (`comfy_core.families.hunyuan_video15.dit.HunyuanVideo15Transformer`, whose token
refiner and ByT5 mapper these names also reach), so `isinstance` with `HunyuanVideo` is true for
HunyuanVideo 1.0 networks only. The constructors are ours (built from a config by our loaders)."""
from compat.facade import facade

_M = "comfy_core.families.hunyuan_video.dit:"
_V15 = "comfy_core.families.hunyuan_video15.dit:"
facade(__name__, {
    "HunyuanVideo": _M + "HunyuanVideoTransformer",
    "HunyuanVideoParams": _M + "HunyuanVideoConfig",
    **{name: _V15 + name for name in ("ByT5Mapper", "IndividualTokenRefiner", "TokenRefiner")},
    "TokenRefinerBlock": _V15 + "RefinerBlock",
})
