"""ComfyUI's `comfy.ldm.hidream.model` for node packs: the HiDream-I1 sparse DiT
(`comfy_core.families.hidream.dit`) and its parts under ComfyUI's names, so a pack's
`isinstance(network, comfy.ldm.hidream.model.HiDreamImageTransformer2DModel)` reaches ours. The
constructors are ours (built from a config by our loaders). `attention(query, key, value,
transformer_options={})` is ComfyUI's module function (compat/ldm_hidream.py), which packs'
HiDream attention replacements import (ComfyUI-NAG)."""
from compat.facade import facade

_M = "comfy_core.families.hidream.dit:"
facade(__name__, {
    "HiDreamImageTransformer2DModel": _M + "HiDreamTransformer",
    "HiDreamImageTransformerBlock": _M + "DoubleStreamBlock",
    "HiDreamImageSingleTransformerBlock": _M + "SingleStreamBlock",
    "HiDreamImageBlock": _M + "BlockHolder",
    "FeedForwardSwiGLU": _M + "SwiGLU",
    "MOEFeedForwardSwiGLU": _M + "MoESwiGLU",
    "attention": "compat.ldm_hidream:attention",
    **{name: _M + name for name in ("HiDreamAttention", "MoEGate", "PatchEmbed", "PooledEmbed", "TextProjection",
                                    "TimestepEmbed")},
})
