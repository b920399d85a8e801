"""ComfyUI's `comfy.ldm.modules.diffusionmodules.openaimodel` for node packs: our UNet and its
blocks. `forward_timestep_embed` and `apply_control` are extension points (compat/facade.py
`point`): a pack replacing them here (Advanced-ControlNet's reference mode) sets its session's
`ExtensionPoints.forward_timestep_embed` / `apply_control`, which our UNet reads at every call;
read back, they are the session's replacement or `comfy_core.models.unet`'s. `th` is torch, as
ComfyUI's module does `import torch as th` (MaraScott's kohya_hiresfix imports it from here), read
on first use so importing this module loads no torch."""
from compat.facade import facade, point

_U = "comfy_core.models.unet:"
_B = "comfy_core.models.unet_blocks:"
facade(__name__, {
    "UNetModel": _U + "UNetModel",
    "TimestepEmbedSequential": _U + "TimestepEmbedSequential",
    "forward_timestep_embed": point("forward_timestep_embed", _U + "forward_timestep_embed"),
    "apply_control": point("apply_control", _U + "apply_control"),
    "Timestep": "compat.noise_aug:Timestep",  # ComfyUI's module over timestep_embedding (Kolors-MZ, unCLIP)
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
    "th": _U + "torch",  # ComfyUI's `import torch as th`
})
