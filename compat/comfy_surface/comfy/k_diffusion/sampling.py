"""ComfyUI's `comfy.k_diffusion.sampling`: every `sample_*` function with k-diffusion's signature
`(model, x, sigmas, extra_args=None, callback=None, disable=None, **options)` and the helpers
samplers use, over comfy_core.sampling.samplers (the namespace module `kdiffusion`).

`sample_<name>` reads and writes the active session's sampler table (`samplers` of its extension
points; compat/samplers_points.py): a pack assigning one (a new sampler, or a wrapper around one
of ours) changes what that session's runs use, and no module of comfy_core. `default_noise_sampler`
is the session's `default_noise_sampler` extension point, which our samplers draw their per-step
noise from.
"""
import sys

from compat.facade import facade, point
from compat.samplers_points import KDiffusionSamplingModule

_NAMESPACE = "comfy_core.sampling.samplers.kdiffusion"
_NAMES = (
    "append_zero", "get_sigmas_karras", "get_sigmas_exponential", "get_sigmas_polyexponential", "get_sigmas_vp",
    "get_sigmas_laplace", "to_d", "get_ancestral_step", "BatchedBrownianTree", "BrownianTreeNoiseSampler",
    "sigma_to_half_log_snr", "half_log_snr_to_sigma", "offset_first_sigma_for_snr", "ei_h_phi_1", "ei_h_phi_2",
    "linear_multistep_coeff", "PIDStepSizeController", "DPMSolver", "DDPMSampler_step", "generic_step_sampler",
    "trange", "tqdm", "torch", "math",
)

facade(__name__, {
    **{name: f"{_NAMESPACE}:{name}" for name in _NAMES},
    "default_noise_sampler": point("default_noise_sampler", "comfy_core.sampling.noise:default_noise_sampler"),
})
sys.modules[__name__].__class__ = KDiffusionSamplingModule
