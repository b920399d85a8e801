"""ComfyUI's `comfy.ldm.util` for node packs."""
from compat.facade import facade

facade(__name__, {
    "exists": "compat.ldm_util:exists",
    "default": "compat.ldm_util:default",
    "instantiate_from_config": "compat.ldm_util:instantiate_from_config",
    "get_obj_from_str": "compat.ldm_util:get_obj_from_str",
    "count_params": "compat.ldm_util:count_params",
    "mean_flat": "compat.ldm_util:mean_flat",
})
