"""ComfyUI's `comfy.t2i_adapter.adapter` for node packs: our T2I-Adapter networks."""
from compat.facade import facade

facade(__name__, {
    "Adapter": "comfy_core.controlnet.t2i_model:Adapter",
    "Adapter_light": "comfy_core.controlnet.t2i_model:AdapterLight",
    "ResnetBlock": "comfy_core.controlnet.t2i_model:AdapterResBlock",
    "Downsample": "comfy_core.controlnet.t2i_model:AdapterDownsample",
})
