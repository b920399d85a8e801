"""ComfyUI's sampler names, in ComfyUI's order, and the function behind each.

`KSAMPLER_NAMES` (39) + `["ddim", "uni_pc", "uni_pc_bh2"]` = `SAMPLER_NAMES` (42), exactly as
ComfyUI's `comfy/samplers.py` lists them, so workflows and `/object_info` match. Every function
returned by `sampler_function` takes a sigma list (k-diffusion's convention); `dpm_fast` and
`dpm_adaptive` are wrapped to turn the list into (sigma_min, sigma_max) as ComfyUI does.
All 42 are implemented; the functions live in `comfy_core.sampling.samplers.kdiffusion` (the
namespace `comfy.k_diffusion.sampling` is over), looked up there by name at each run.

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

# The live name lists. ComfyUI's `comfy.samplers.KSAMPLER_NAMES` and `SAMPLER_NAMES` (which is
# also `KSampler.SAMPLERS`) are mutable lists that node packs extend to add samplers (smZNodes
# inserts "dpmpp_2m_alt" into `KSampler.SAMPLERS`); the compat surface hands out these very
# objects and the built-in nodes read their combos from them when rendered and validated, so a
# name a pack adds is offered and accepted like ComfyUI's own. The tuples above stay ComfyUI's.
KSAMPLER_NAME_LIST: list[str] = list(KSAMPLER_NAMES)
SAMPLER_NAME_LIST: list[str] = list(SAMPLER_NAMES)

SamplerFunction = Callable[..., object]

# Names whose function is not `sample_<name>` of the k-diffusion namespace (ComfyUI's `ksampler`
# and `sampler_object` special cases): dpm_fast / dpm_adaptive take (sigma_min, sigma_max), so a
# wrapper turns the sigma list into those; ddim is euler (its random inpaint noise lives in
# `sampler_object`); uni_pc lives beside k-diffusion, as ComfyUI's `extra_samplers.uni_pc`.
_SPECIAL: dict[str, tuple[str, str]] = {
    "dpm_fast": ("comfy_core.sampling.samplers.dpm_solver", "sample_dpm_fast_sigmas"),
    "dpm_adaptive": ("comfy_core.sampling.samplers.dpm_solver", "sample_dpm_adaptive_sigmas"),
    "ddim": ("comfy_core.sampling.samplers.kdiffusion", "sample_euler"),
    "uni_pc": ("comfy_core.sampling.samplers.uni_pc", "sample_unipc"),
    "uni_pc_bh2": ("comfy_core.sampling.samplers.uni_pc", "sample_unipc_bh2"),
}


def implemented_sampler_names() -> tuple[str, ...]:
    """The names of `SAMPLER_NAMES` that have an implementation, in ComfyUI's order."""
    return tuple(n for n in SAMPLER_NAMES if _lookup(n) is not None)


def _lookup(name: str) -> SamplerFunction | None:
    import importlib

    if name in _SPECIAL:
        module, attribute = _SPECIAL[name]
        return getattr(importlib.import_module(module), attribute)
    # Read from the namespace module on every call (ComfyUI's `getattr(k_diffusion_sampling,
    # "sample_" + name)`): a pack that assigns `comfy.k_diffusion.sampling.sample_<name>` (to add a
    # sampler or to wrap one of ours) assigns it there, and the next run uses it.
    namespace = importlib.import_module("comfy_core.sampling.samplers.kdiffusion")
    fn = getattr(namespace, f"sample_{name}", None)
    return fn if callable(fn) else None


def sampler_function(name: str) -> SamplerFunction:
    """The sampler function for a sampler name: ComfyUI's, or one a node pack registered as
    `comfy.k_diffusion.sampling.sample_<name>`."""
    fn = _lookup(name) if isinstance(name, str) else None
    if fn is None:
        raise UnknownSamplerError(
            f"unknown sampler {name!r}: neither one of {', '.join(SAMPLER_NAME_LIST)} with an implementation "
            f"nor a function a node pack registered as comfy.k_diffusion.sampling.sample_{name}")
    return fn
