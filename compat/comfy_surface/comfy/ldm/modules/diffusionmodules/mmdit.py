"""ComfyUI's `comfy.ldm.modules.diffusionmodules.mmdit` for node packs: SD3 / SD3.5's MMDiT and its
blocks (comfy_core/families/sd3/mmdit.py, mmdit_blocks.py), so packs that import `JointBlock`,
`RMSNorm`, ... (Easy-Use's SD3 IP-Adapter) or subclass `MMDiT` get the classes our loaded SD3
model is built of. `block_mixing` / `_block_mixing` live in mmdit_blocks, where `JointBlock`
reads them at every call: a pack replacing them here reaches our model. The numpy sin-cos tables,
`gate_cat`, `default` and the file's own `SwiGLUFeedForward` signature are in compat/ldm_mmdit.py.
"""
from compat.facade import facade

_M = "comfy_core.families.sd3.mmdit:"
_B = "comfy_core.families.sd3.mmdit_blocks:"
_G = "compat.ldm_mmdit:"
facade(__name__, {
    "MMDiT": _M + "MMDiT",
    "OpenAISignatureMMDITWrapper": _M + "OpenAISignatureMMDITWrapper",
    **{name: _B + name for name in (
        "Mlp", "PatchEmbed", "modulate", "get_2d_sincos_pos_embed_torch", "TimestepEmbedder", "VectorEmbedder",
        "split_qkv", "SelfAttention", "RMSNorm", "DismantledBlock", "block_mixing", "_block_mixing", "JointBlock",
        "FinalLayer", "SelfAttentionContext", "ContextProcessorBlock", "ContextProcessor")},
    **{name: _G + name for name in (
        "default", "get_2d_sincos_pos_embed", "get_2d_sincos_pos_embed_from_grid", "get_1d_sincos_pos_embed_from_grid",
        "get_1d_sincos_pos_embed_from_grid_torch", "gate_cat", "SwiGLUFeedForward")},
})
