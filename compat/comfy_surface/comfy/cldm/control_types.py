"""ComfyUI's `comfy.cldm.control_types`: the union ControlNet's task indices (comfy_core's table)."""
from compat.facade import facade

facade(__name__, {"UNION_CONTROLNET_TYPES": "comfy_core.controlnet.types:UNION_CONTROLNET_TYPES"})
