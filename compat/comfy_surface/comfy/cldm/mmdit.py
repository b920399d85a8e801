"""ComfyUI's `comfy.cldm.mmdit` for node packs: `ControlNet` is our SD3 / SD3.5 ControlNet network
(comfy_core/controlnet/mmdit_controlnet.py: an MMDiT subclass, ComfyUI's constructor), so
`isinstance` checks and subclasses see the module a loaded SD3 ControlNet runs."""
from compat.facade import facade

facade(__name__, {"ControlNet": "comfy_core.controlnet.mmdit_controlnet:MMDiTControlNet"})
