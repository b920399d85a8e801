"""ComfyUI's sampler names, in ComfyUI's order, and the function behind each.

`KSAMPLER_NAMES` (39) + `["ddim", "uni_pc", "uni_pc_bh2"]` = `SAMPLER_NAMES` (42), exactly as
ComfyUI's `comfy/samplers.py` lists them, so workflows and `/object_info` match. Every function
returned by `sampler_function` takes a sigma list (k-diffusion's convention); `dpm_fast` and
`dpm_adaptive` are wrapped to turn the list into (sigma_min, sigma_max) as ComfyUI does.
All 42 are implemented; the functions live in `comfy_core.sampling.samplers.kdiffusion` (the
namespace `comfy.k_diffusion.sampling` is over).

What a host changed is read from the extension points in force (comfy_core/extension_points.py)
at each lookup, never from a module global: `sampler_names()` is the host's live list (a pack's
`KSampler.SAMPLERS.insert(...)`) or ours, and `sampler_function(name)` is the host's
`samplers[name]` (a pack's `comfy.k_diffusion.sampling.sample_<name> = fn`) or ours.

The name lists import without torch (the sampler modules are imported on first lookup), so the
node layer can declare its combos from them before torch is loaded.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

from comfy_core import extension_points


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

# Names whose function is not `sample_<name>` of the k-diffusion namespace (ComfyUI's `ksampler`
# and `sampler_object` special cases): dpm_fast / dpm_adaptive take (sigma_min, sigma_max), so a
# wrapper turns the sigma list into those (`dpm_solver.sigma_range_sampler` around a host's
# replacement); ddim is euler (handled in `_lookup`; its random inpaint noise lives in
# `guider.sampler_object`); uni_pc lives beside k-diffusion, as ComfyUI's `extra_samplers.uni_pc`.
_SPECIAL: dict[str, tuple[str, str]] = {
    "dpm_fast": ("comfy_core.sampling.samplers.dpm_solver", "sample_dpm_fast_sigmas"),
    "dpm_adaptive": ("comfy_core.sampling.samplers.dpm_solver", "sample_dpm_adaptive_sigmas"),
    "uni_pc": ("comfy_core.sampling.samplers.uni_pc", "sample_unipc"),
    "uni_pc_bh2": ("comfy_core.sampling.samplers.uni_pc", "sample_unipc_bh2"),
}


def sampler_names() -> Sequence[str]:
    """The sampler names on offer now: the host's live list (`SAMPLER_NAMES` as its packs left it)
    or ComfyUI's."""
    names = extension_points.current().sampler_names
    return SAMPLER_NAMES if names is None else names


def ksampler_names() -> Sequence[str]:
    """ComfyUI's `KSAMPLER_NAMES` as the host's packs left it (ours without a host)."""
    names = extension_points.current().ksampler_names
    return KSAMPLER_NAMES if names is None else names


def implemented_sampler_names() -> tuple[str, ...]:
    """The names of `SAMPLER_NAMES` that have an implementation, in ComfyUI's order."""
    return tuple(n for n in SAMPLER_NAMES if _lookup(n) is not None)


@functools.lru_cache(maxsize=None)
def built_in_kdiffusion_function(function_name: str) -> SamplerFunction | None:
    """Our `sample_<name>` of the k-diffusion namespace (a fixed module: nothing assigns into it)."""
    import importlib

    fn = getattr(importlib.import_module("comfy_core.sampling.samplers.kdiffusion"), f"sample_{function_name}", None)
    return fn if callable(fn) else None


def kdiffusion_function(function_name: str) -> SamplerFunction | None:
    """`sample_<function_name>` as a sampler run sees it: the host's (a pack's assignment to
    `comfy.k_diffusion.sampling`) or ours; None when neither has one."""
    fn = extension_points.current().samplers.get(function_name)
    return fn if fn is not None else built_in_kdiffusion_function(function_name)


def _lookup(name: str) -> SamplerFunction | None:
    import importlib

    if name == "ddim":
        return kdiffusion_function("euler")
    if name in ("dpm_fast", "dpm_adaptive"):
        replaced = extension_points.current().samplers.get(name)
        if replaced is not None:  # a host's sample_dpm_fast / sample_dpm_adaptive, given the sigma range
            from comfy_core.sampling.samplers.dpm_solver import sigma_range_sampler

            return sigma_range_sampler(replaced, steps_from_sigmas=name == "dpm_fast")
    if name in _SPECIAL:
        module, attribute = _SPECIAL[name]
        return getattr(importlib.import_module(module), attribute)
    return kdiffusion_function(name)


def sampler_function(name: str) -> SamplerFunction:
    """The sampler function for a sampler name: ComfyUI's, or one a node pack registered as
    `comfy.k_diffusion.sampling.sample_<name>`."""
    fn = _lookup(name) if isinstance(name, str) else None
    if fn is None:
        raise UnknownSamplerError(
            f"unknown sampler {name!r}: neither one of {', '.join(sampler_names())} with an implementation "
            f"nor a function a node pack registered as comfy.k_diffusion.sampling.sample_{name}")
    return fn
