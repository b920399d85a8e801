"""ComfyUI's `comfy.ldm.modules.attention` for node packs: our transformer classes (the ones
our UNet is built of, so `isinstance` and subclassing see the model's modules) and attention
functions with ComfyUI's calling convention. `optimized_attention` / `optimized_attention_masked`
are extension points (compat/facade.py `point`): a pack assigning them here (IPAdapter-,
KJNodes-style) sets its session's `ExtensionPoints.attention` (`_masked`), which every model
block reads at every call (comfy_core.attention.calling `attend`); read back, they are the
session's replacement or our `attention_in_force`. Named functions (`register_attention_function`,
`REGISTERED_ATTENTION_FUNCTIONS`) are the session's too (compat/ldm_attention.py)."""
from compat.facade import facade, point

_T = "comfy_core.models.transformer:"
_C = "comfy_core.attention.calling:"
_A = "compat.ldm_attention:"
facade(__name__, {
    "CrossAttention": _T + "CrossAttention",
    "BasicTransformerBlock": _T + "BasicTransformerBlock",
    "SpatialTransformer": _T + "SpatialTransformer",
    "SpatialVideoTransformer": "comfy_core.models.video_blocks:SpatialVideoTransformer",
    "FeedForward": _T + "FeedForward",
    "GEGLU": _T + "GEGLU",
    "optimized_attention": point("attention", _C + "attention_in_force"),
    "optimized_attention_masked": point("attention_masked", _C + "attention_in_force"),
    "optimized_attention_for_device": _T + "optimized_attention_for_device",
    "get_attention_function": _A + "get_attention_function",
    "default": _T + "default",
    "exists": _T + "exists",
    "Normalize": "compat.ldm_util:normalize_transformer",
    "wrap_attn": _C + "wrap_attn",
    "attention_basic": _C + "attention_basic",
    "attention_pytorch": _C + "attention_pytorch",
    "attention_sub_quad": _C + "attention_sub_quad",
    "attention_split": _C + "attention_split",
    "attention_xformers": _C + "attention_xformers",
    "attention_sage": _C + "attention_sage",
    "attention_flash": _C + "attention_flash",
    "register_attention_function": _A + "register_attention_function",
    "REGISTERED_ATTENTION_FUNCTIONS": _A + "REGISTERED_ATTENTION_FUNCTIONS",
    "ops": "compat.ldm_ops:disable_weight_init",
})
