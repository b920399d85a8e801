"""ComfyUI's `comfy.ldm.omnigen.omnigen2` for node packs: the OmniGen 2 transformer
(`comfy_core.families.omnigen2.dit`) and its blocks under ComfyUI's names. The constructors are
ours (built from a config by our loaders)."""
from compat.facade import facade

_M = "comfy_core.families.omnigen2.dit:"
facade(__name__, {
    "OmniGen2Transformer2DModel": _M + "OmniGen2Transformer",
    "OmniGen2TransformerBlock": _M + "TransformerBlock",
    "LuminaFeedForward": _M + "FeedForward",
    "LuminaRMSNormZero": _M + "ModulatedNorm",
    "LuminaLayerNormContinuous": _M + "NormOut",
    "Lumina2CombinedTimestepCaptionEmbedding": _M + "TimeCaptionEmbedding",
    **{name: _M + name for name in ("Attention", "TimestepEmbedding")},
})
