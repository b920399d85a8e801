"""ComfyUI's `comfy.ldm.wan.model` for node packs: the Wan DiT (`comfy_core.families.wan.dit`) and its
blocks (`comfy_core.families.wan.blocks`) under ComfyUI's names, so a pack's `isinstance(network,
comfy.ldm.wan.model.WanModel)` or its use of `WanAttentionBlock` / `sinusoidal_embedding_1d`
reaches ours."""
from compat.facade import facade

_M = "comfy_core.families.wan.dit:"
_B = "comfy_core.families.wan.blocks:"
facade(__name__, {
    **{name: _M + name for name in ("WanModel", "VaceWanModel", "CameraWanModel")},
    **{name: _B + name for name in ("WanSelfAttention", "WanT2VCrossAttention", "WanI2VCrossAttention",
                                    "WanAttentionBlock", "VaceWanAttentionBlock", "Head", "MLPProj", "WanCamAdapter",
                                    "WanCamResidualBlock", "repeat_e", "sinusoidal_embedding_1d")},
    "WAN_CROSSATTENTION_CLASSES": _B + "CROSS_ATTENTION_CLASSES",
})
