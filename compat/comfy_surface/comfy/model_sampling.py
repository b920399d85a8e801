"""ComfyUI's `comfy.model_sampling` for node packs (compat/mp_model_sampling.py): prediction
mixins and table classes packs combine, built on our sampling objects."""
from compat.facade import facade

facade(__name__, {name: f"compat.mp_model_sampling:{name}" for name in (
    "EPS", "V_PREDICTION", "EDM", "X0", "IMG_TO_IMG", "CONST", "COSMOS_RFLOW", "ModelSamplingDiscrete",
    "ModelSamplingContinuousEDM", "ModelSamplingContinuousV", "ModelSamplingDiscreteFlow", "ModelSamplingAV",
    "ModelSamplingFlux", "StableCascadeSampling", "time_snr_shift", "flux_time_shift", "reshape_sigma")})
facade(__name__, {"rescale_zero_terminal_snr_sigmas": "comfy_core.models.model_sampling:rescale_zero_terminal_snr"})
