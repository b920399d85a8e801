"""ComfyUI's `comfy.k_diffusion.sampling`: every `sample_*` function with k-diffusion's signature
`(model, x, sigmas, extra_args=None, callback=None, disable=None, **options)` and the helpers
samplers use, over comfy_core.sampling.samplers (the namespace module `kdiffusion`).

A pack assigning `sample_<name>` here (a new sampler, or a wrapper around one of ours) assigns it
in that namespace, where the sampler registry reads it at each run; `default_noise_sampler`
assigned here is the one our samplers draw their per-step noise from.
"""
import sys

from compat.facade import facade
from compat.samplers_kdiffusion import NAMESPACE, KDiffusionSamplingModule

_NAMES = (
    "append_zero", "get_sigmas_karras", "get_sigmas_exponential", "get_sigmas_polyexponential", "get_sigmas_vp",
    "get_sigmas_laplace", "to_d", "get_ancestral_step", "BatchedBrownianTree", "BrownianTreeNoiseSampler",
    "sigma_to_half_log_snr", "half_log_snr_to_sigma", "offset_first_sigma_for_snr", "ei_h_phi_1", "ei_h_phi_2",
    "linear_multistep_coeff", "PIDStepSizeController", "DPMSolver", "DDPMSampler_step", "generic_step_sampler",
    "trange", "tqdm", "torch", "math",
    "sample_euler", "sample_euler_ancestral", "sample_euler_ancestral_RF", "sample_dpm_2_ancestral_RF",
    "sample_dpmpp_2s_ancestral_RF", "sample_heun", "sample_dpm_2", "sample_dpm_2_ancestral", "sample_lms",
    "sample_dpm_fast", "sample_dpm_adaptive", "sample_dpmpp_2s_ancestral", "sample_dpmpp_sde", "sample_dpmpp_sde_gpu",
    "sample_dpmpp_2m", "sample_dpmpp_2m_sde", "sample_dpmpp_2m_sde_gpu", "sample_dpmpp_2m_sde_heun",
    "sample_dpmpp_2m_sde_heun_gpu", "sample_dpmpp_3m_sde", "sample_dpmpp_3m_sde_gpu", "sample_ddpm", "sample_lcm",
    "sample_heunpp2", "sample_ipndm", "sample_ipndm_v", "sample_deis", "sample_euler_ancestral_cfg_pp",
    "sample_euler_cfg_pp", "sample_dpmpp_2s_ancestral_cfg_pp", "sample_dpmpp_2m_cfg_pp", "sample_res_multistep",
    "sample_res_multistep_cfg_pp", "sample_res_multistep_ancestral", "sample_res_multistep_ancestral_cfg_pp",
    "sample_gradient_estimation", "sample_gradient_estimation_cfg_pp", "sample_er_sde", "sample_seeds_2",
    "sample_seeds_3", "sample_sa_solver", "sample_sa_solver_pece",
)

facade(__name__, {
    **{name: f"{NAMESPACE}:{name}" for name in _NAMES},
    # Its home is the noise module, whose global our samplers call (comfy_core/sampling/samplers/common.py).
    "default_noise_sampler": "comfy_core.sampling.noise:default_noise_sampler",
})
sys.modules[__name__].__class__ = KDiffusionSamplingModule
