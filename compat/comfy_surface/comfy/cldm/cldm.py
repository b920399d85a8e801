"""ComfyUI's `comfy.cldm.cldm` for node packs: `ControlNet` is our ControlNet network (the
module a loaded ControlNet runs), so `isinstance` and subclass definitions see it."""
from compat.facade import facade

facade(__name__, {
    "ControlNet": "comfy_core.controlnet.model:ControlNetModel",
    "ControlledUnetModel": "comfy_core.models.unet:UNetModel",
    "TimestepEmbedSequential": "comfy_core.models.unet:TimestepEmbedSequential",
    "ResBlock": "comfy_core.models.unet_blocks:ResBlock",
    "Downsample": "comfy_core.models.unet_blocks:Downsample",
    "SpatialTransformer": "comfy_core.models.transformer:SpatialTransformer",
    "timestep_embedding": "comfy_core.models.unet_blocks:timestep_embedding",
    "zero_module": "compat.ldm_util:zero_module",
    "conv_nd": "compat.ldm_util:conv_nd",
    "exists": "compat.ldm_util:exists",
})
