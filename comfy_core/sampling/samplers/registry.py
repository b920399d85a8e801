"""ComfyUI's sampler names, in ComfyUI's order, and the function behind each.

`KSAMPLER_NAMES` (39) + `["ddim", "uni_pc", "uni_pc_bh2"]` = `SAMPLER_NAMES` (42), exactly as
ComfyUI's `comfy/samplers.py` lists them, so workflows and `/object_info` match. Every function
returned by `sampler_function` takes a sigma list (k-diffusion's convention); `dpm_fast` and
`dpm_adaptive` are wrapped to turn the list into (sigma_min, sigma_max) as ComfyUI does.
All 42 are implemented.

The name lists import without torch (the sampler modules are imported on first lookup), so the
node layer can declare its combos from them before torch is loaded.
"""
from __future__ import annotations

from typing import Callable


class UnknownSamplerError(ValueError):
    """A sampler name that is not one of `SAMPLER_NAMES`."""


KSAMPLER_NAMES: tuple[str, ...] = (
    "euler", "euler_cfg_pp", "euler_ancestral", "euler_ancestral_cfg_pp", "heun", "heunpp2", "dpm_2",
    "dpm_2_ancestral", "lms", "dpm_fast", "dpm_adaptive", "dpmpp_2s_ancestral", "dpmpp_2s_ancestral_cfg_pp",
    "dpmpp_sde", "dpmpp_sde_gpu", "dpmpp_2m", "dpmpp_2m_cfg_pp", "dpmpp_2m_sde", "dpmpp_2m_sde_gpu",
    "dpmpp_2m_sde_heun", "dpmpp_2m_sde_heun_gpu", "dpmpp_3m_sde", "dpmpp_3m_sde_gpu", "ddpm", "lcm",
    "ipndm", "ipndm_v", "deis", "res_multistep", "res_multistep_cfg_pp", "res_multistep_ancestral",
    "res_multistep_ancestral_cfg_pp", "gradient_estimation", "gradient_estimation_cfg_pp", "er_sde",
    "seeds_2", "seeds_3", "sa_solver", "sa_solver_pece",
)

SAMPLER_NAMES: tuple[str, ...] = KSAMPLER_NAMES + ("ddim", "uni_pc", "uni_pc_bh2")

# Samplers that want `steps + 1` sigmas with the penultimate dropped (ComfyUI's KSampler rule).
DISCARD_PENULTIMATE_SIGMA_SAMPLERS: frozenset[str] = frozenset({"dpm_2", "dpm_2_ancestral", "uni_pc", "uni_pc_bh2"})

SamplerFunction = Callable[..., object]


def _implemented() -> dict[str, SamplerFunction]:
    from comfy_core.sampling.samplers import (ancestral, deis, deterministic, dpm_solver, extra, sa_solver, sde,
                                              stochastic_ei, uni_pc)

    return {
        "euler": deterministic.sample_euler,
        "euler_ancestral": ancestral.sample_euler_ancestral,
        "heun": deterministic.sample_heun,
        "heunpp2": deterministic.sample_heunpp2,
        "dpm_2": deterministic.sample_dpm_2,
        "dpm_2_ancestral": ancestral.sample_dpm_2_ancestral,
        "lms": deterministic.sample_lms,
        "dpm_fast": dpm_solver.sample_dpm_fast_sigmas,
        "dpm_adaptive": dpm_solver.sample_dpm_adaptive_sigmas,
        "dpmpp_2s_ancestral": ancestral.sample_dpmpp_2s_ancestral,
        "dpmpp_sde": sde.sample_dpmpp_sde,
        "dpmpp_sde_gpu": sde.sample_dpmpp_sde_gpu,
        "dpmpp_2m": deterministic.sample_dpmpp_2m,
        "dpmpp_2m_sde": sde.sample_dpmpp_2m_sde,
        "dpmpp_2m_sde_gpu": sde.sample_dpmpp_2m_sde_gpu,
        "dpmpp_2m_sde_heun": sde.sample_dpmpp_2m_sde_heun,
        "dpmpp_2m_sde_heun_gpu": sde.sample_dpmpp_2m_sde_heun_gpu,
        "dpmpp_3m_sde": sde.sample_dpmpp_3m_sde,
        "dpmpp_3m_sde_gpu": sde.sample_dpmpp_3m_sde_gpu,
        "ddpm": ancestral.sample_ddpm,
        "lcm": ancestral.sample_lcm,
        "ipndm": deterministic.sample_ipndm,
        "ipndm_v": deterministic.sample_ipndm_v,
        "euler_cfg_pp": extra.sample_euler_cfg_pp,
        "euler_ancestral_cfg_pp": extra.sample_euler_ancestral_cfg_pp,
        "dpmpp_2m_cfg_pp": extra.sample_dpmpp_2m_cfg_pp,
        "dpmpp_2s_ancestral_cfg_pp": extra.sample_dpmpp_2s_ancestral_cfg_pp,
        "gradient_estimation": extra.sample_gradient_estimation,
        "gradient_estimation_cfg_pp": extra.sample_gradient_estimation_cfg_pp,
        "res_multistep": extra.sample_res_multistep,
        "res_multistep_cfg_pp": extra.sample_res_multistep_cfg_pp,
        "res_multistep_ancestral": extra.sample_res_multistep_ancestral,
        "res_multistep_ancestral_cfg_pp": extra.sample_res_multistep_ancestral_cfg_pp,
        "deis": deis.sample_deis,
        "er_sde": stochastic_ei.sample_er_sde,
        "sa_solver": sa_solver.sample_sa_solver,
        "sa_solver_pece": sa_solver.sample_sa_solver_pece,
        "seeds_2": stochastic_ei.sample_seeds_2,
        "seeds_3": stochastic_ei.sample_seeds_3,
        # ddim is euler; the difference (random inpaint noise) lives in the sampling driver.
        "ddim": deterministic.sample_euler,
        "uni_pc": uni_pc.sample_unipc,
        "uni_pc_bh2": uni_pc.sample_unipc_bh2,
    }


def implemented_sampler_names() -> tuple[str, ...]:
    """The names of `SAMPLER_NAMES` that have an implementation, in ComfyUI's order."""
    table = _implemented()
    return tuple(n for n in SAMPLER_NAMES if n in table)


def sampler_function(name: str) -> SamplerFunction:
    """The sampler function for a ComfyUI sampler name."""
    fn = _implemented().get(name) if name in SAMPLER_NAMES else None
    if fn is None:
        raise UnknownSamplerError(f"unknown sampler {name!r}; expected one of {', '.join(SAMPLER_NAMES)}")
    return fn
