"""ComfyUI's `comfy.ldm.lightricks.model` for node packs: the LTX-Video DiT
(`comfy_core.families.ltxv.dit`) and its blocks under ComfyUI's names, so a pack's
`isinstance(network, comfy.ldm.lightricks.model.LTXVModel)` reaches ours, and its RoPE helpers in
ComfyUI's shapes (compat/ldm_lightricks.py): today's `LTXRopeType` / `LTXFrequenciesPrecision`
config enums, the frequency grids `generate_freq_grid_np` / `_pytorch` (the engine's LTX-2 grid,
comfy_core/families/ltx2/rope.py), the weightless `Timesteps` embedding, `TimestepEmbedding` with
ComfyUI's constructor (`isinstance` also true for our network's time embedder), and early 2026's
`interleaved_freqs_cis` / `split_freqs_cis` (gone from today's ComfyUI, still imported by
ComfyUI-LTXVideo). `LTXBaseModel`, today's common base, answers `isinstance` for our LTX-Video and
LTX-2 networks (compat/ldm_lightricks_base.py)."""
from compat.facade import facade

_M = "comfy_core.families.ltxv.dit:"
_A = "compat.ldm_lightricks:"
facade(__name__, {
    **{name: _M + name for name in ("LTXVModel", "BasicTransformerBlock", "FeedForward", "AdaLayerNormSingle")},
    "CrossAttention": _M + "Attention",
    "PixArtAlphaTextProjection": _M + "CaptionProjection",
    "LTXBaseModel": "compat.ldm_lightricks_base:LTXBaseModel",
    **{name: _A + name for name in ("apply_rotary_emb", "get_fractional_positions", "get_timestep_embedding",
                                    "precompute_freqs_cis", "LTXRopeType", "LTXFrequenciesPrecision",
                                    "generate_freq_grid_np", "generate_freq_grid_pytorch", "Timesteps",
                                    "TimestepEmbedding", "interleaved_freqs_cis", "split_freqs_cis")},
})
