"""ComfyUI's `comfy.ldm.modules.diffusionmodules.openaimodel` for node packs: our UNet and its
blocks. `forward_timestep_embed` and `apply_control` live in `comfy_core.models.unet`, where our
UNet reads them at every call, so a pack replacing them here (Advanced-ControlNet's reference
mode) is used by our UNet."""
from compat.facade import facade

_U = "comfy_core.models.unet:"
_B = "comfy_core.models.unet_blocks:"
facade(__name__, {
    "UNetModel": _U + "UNetModel",
    "TimestepEmbedSequential": _U + "TimestepEmbedSequential",
    "forward_timestep_embed": _U + "forward_timestep_embed",
    "apply_control": _U + "apply_control",
    "TimestepBlock": _B + "TimestepBlock",
    "ResBlock": _B + "ResBlock",
    "Upsample": _B + "Upsample",
    "Downsample": _B + "Downsample",
    "timestep_embedding": _B + "timestep_embedding",
    "avg_pool_nd": _B + "avg_pool_nd",
    "VideoResBlock": "comfy_core.models.video_blocks:VideoResBlock",
    "AlphaBlender": "comfy_core.models.video_blocks:AlphaBlender",
    "SpatialTransformer": "comfy_core.models.transformer:SpatialTransformer",
    "SpatialVideoTransformer": "comfy_core.models.video_blocks:SpatialVideoTransformer",
    "default": "comfy_core.models.transformer:default",
    "exists": "comfy_core.models.transformer:exists",
    "checkpoint": "compat.ldm_util:checkpoint",
    "ops": "compat.ldm_ops:disable_weight_init",
})
