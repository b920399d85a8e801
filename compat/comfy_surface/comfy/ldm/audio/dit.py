"""ComfyUI's `comfy.ldm.audio.dit` for node packs: the Stable Audio Open DiT
(`comfy_core.families.stable_audio.dit`) and its parts under ComfyUI's names. The constructors are
ours (built from a config by our loaders)."""
from compat.facade import facade

_M = "comfy_core.families.stable_audio.dit:"
facade(__name__, {
    "AudioDiffusionTransformer": _M + "StableAudioDiT",
    **{name: _M + name for name in ("Attention", "ContinuousTransformer", "FeedForward", "FourierFeatures", "GLU",
                                    "LayerNorm", "RotaryEmbedding", "TransformerBlock")},
})
