"""ComfyUI's `comfy.ldm.lightricks.model` for node packs: the LTX-Video DiT
(`comfy_core.families.ltxv.dit`) and its blocks under ComfyUI's names, so a pack's
`isinstance(network, comfy.ldm.lightricks.model.LTXVModel)` reaches ours, and its RoPE helpers in
ComfyUI's shapes (compat/ldm_lightricks.py)."""
from compat.facade import facade

_M = "comfy_core.families.ltxv.dit:"
_A = "compat.ldm_lightricks:"
facade(__name__, {
    **{name: _M + name for name in ("LTXVModel", "BasicTransformerBlock", "FeedForward", "AdaLayerNormSingle")},
    "CrossAttention": _M + "Attention",
    "PixArtAlphaTextProjection": _M + "CaptionProjection",
    "TimestepEmbedding": _M + "TimestepEmbedder",
    **{name: _A + name for name in ("apply_rotary_emb", "get_fractional_positions", "get_timestep_embedding",
                                    "precompute_freqs_cis")},
})
