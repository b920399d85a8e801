"""ComfyUI's `comfy_extras.nodes_model_advanced`: its nodes' facades (ModelSamplingDiscrete, ...,
RescaleCFG, ModelComputeDtype) plus the module-level sampling classes packs import from it and
subclass (AnimateDiff-Evolved builds `class X(ModelSamplingDiscreteDistilled, LCM)`): `LCM` and
`ModelSamplingDiscreteDistilled` are compat/mp_model_sampling.py's, so what a pack builds is a
sampling object our sampler runs. The `comfy.model_sampling` names ComfyUI's module imports
(`comfy.model_sampling.X0`, ...) and `rescale_zero_terminal_snr_sigmas` are reachable here too."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {
    **{name: f"compat.mp_model_sampling:{name}" for name in (
        "LCM", "ModelSamplingDiscreteDistilled", "EPS", "V_PREDICTION", "X0", "IMG_TO_IMG")},
    "rescale_zero_terminal_snr_sigmas": "comfy_core.models.model_sampling:rescale_zero_terminal_snr",
})
