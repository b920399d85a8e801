"""ComfyUI's `comfy.ldm.qwen_image.model` for node packs: the Qwen-Image MMDiT
(`comfy_core.families.qwen_image.dit`) and its blocks under ComfyUI's names, so a pack's
`isinstance(network, comfy.ldm.qwen_image.model.QwenImageTransformer2DModel)` reaches ours. The
constructors are ours (built from a config by our loaders). `apply_rotary_emb(x, freqs_cis)` is ComfyUI's
RoPE step of its attention (compat/ldm_qwen_image.py; nunchaku's Qwen-Image attention calls it)."""
from compat.facade import facade

_M = "comfy_core.families.qwen_image.dit:"
facade(__name__, {
    "QwenImageTransformer2DModel": _M + "QwenImageTransformer",
    **{name: _M + name for name in ("QwenImageTransformerBlock", "FeedForward", "GELU", "LastLayer")},
    "Attention": _M + "JointAttention",
    "QwenTimestepProjEmbeddings": _M + "TimeTextEmbed",
    "apply_rotary_emb": "compat.ldm_qwen_image:apply_rotary_emb",
})
