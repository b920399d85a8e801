"""ComfyUI's `comfy_extras.nodes_custom_sampler`: its nodes' facades plus the module-level classes
packs import from it (Impact-Pack and Easy-Use build NOISE objects and guiders themselves):
`Noise_RandomNoise` / `Noise_EmptyNoise` are our NOISE objects, `Guider_Basic` / `Guider_DualCFG`
our guiders (subclasses of `comfy.samplers.CFGGuider`, as in ComfyUI)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {
    "Noise_RandomNoise": "comfy_core.sampling.noise_object:RandomNoise",
    "Noise_EmptyNoise": "comfy_core.sampling.noise_object:EmptyNoise",
    "Guider_Basic": "comfy_core.sampling.guider:BasicGuider",
    "Guider_DualCFG": "comfy_core.sampling.guider:DualCFGGuider",
})
