"""The sampling driver: KSampler's composition of sigmas, a sampler object, noise and a CFG guider.

`sample(...)` has the semantics of ComfyUI's `comfy.sample.sample` + `comfy.samplers.KSampler`
(the KSampler and KSamplerAdvanced nodes call it); `sample_custom(...)` those of
`comfy.sample.sample_custom` / `comfy.samplers.sample` (any sigma list, any sampler). Both build
the same parts SamplerCustomAdvanced is given (`sampler_object.KSampler`, `guider.CFGGuider`) and
run `CFGGuider.sample`, the one sampling path (`shared/reference/samplers.md` sections 3 and 6):
1. sigmas: the scheduler for `steps` (steps+1 with the penultimate dropped for dpm_2*, uni_pc*);
   `denoise < 1` schedules `int(steps/denoise)` and keeps the last steps+1; `start_step` /
   `last_step` slice, `force_full_denoise` ends at 0.
2. `CFGGuider.sample`: inside `with model.applied() as dm` (patches on, removed after, also on
   error or interrupt) a non-zero latent is scaled into model space, conditioning is prepared;
3. the sampler object starts at `latent + noise * sigma0` (or `* sqrt(1 + sigma0^2)` from pure
   noise), runs its function on the guider and the result is scaled back out of model space.
"""
from __future__ import annotations

import types
from typing import Any

import torch

from comfy_core.sampling.guider import (CFGGuider, ProgressCallback, SamplingError, prepare_mask,  # noqa: F401
                                        process_latent_in, process_latent_out)
from comfy_core.sampling import ksampler as _ksampler
from comfy_core.sampling import schedulers as _schedulers
from comfy_core.sampling.model_sampling import ModelSampling
from comfy_core.sampling.sampler_object import KSampler, sampler_object
from comfy_core.sampling.samplers.registry import DISCARD_PENULTIMATE_SIGMA_SAMPLERS, sampler_function
from comfy_core.sampling.schedulers import calculate_sigmas

# SamplingError, ProgressCallback, prepare_mask and process_latent_in/out live in guider.py and are
# re-exported here, where callers have always found them.


# -- sigma selection (pure) --------------------------------------------------------------------

def ksampler_sigmas(model_sampling: ModelSampling, steps: int, sampler_name: str, scheduler: str,
                    denoise: float | None = 1.0) -> torch.Tensor:
    """KSampler's sigma list for `steps` and `denoise` (ComfyUI `KSampler.set_steps`)."""
    if steps < 1:
        raise SamplingError(f"KSampler: steps must be >= 1, got {steps}")

    def schedule(n: int) -> torch.Tensor:
        if sampler_name in DISCARD_PENULTIMATE_SIGMA_SAMPLERS:
            sigmas = calculate_sigmas(model_sampling, scheduler, n + 1)
            return torch.cat([sigmas[:-2], sigmas[-1:]])
        return calculate_sigmas(model_sampling, scheduler, n)

    if denoise is None or denoise > 0.9999:
        return schedule(steps)
    if denoise <= 0.0:
        return torch.FloatTensor([])
    return schedule(int(steps / denoise))[-(steps + 1):]


def slice_sigmas(sigmas: torch.Tensor, start_step: int | None = None, last_step: int | None = None,
                 force_full_denoise: bool = False) -> torch.Tensor | None:
    """KSamplerAdvanced's window on the schedule; None when `start_step` leaves nothing to do."""
    if last_step is not None and last_step < len(sigmas) - 1:
        sigmas = sigmas[:last_step + 1].clone()
        if force_full_denoise:
            sigmas[-1] = 0
    if start_step is not None:
        if start_step < len(sigmas) - 1:
            sigmas = sigmas[start_step:]
        else:
            return None
    return sigmas


# -- the driver --------------------------------------------------------------------------------

def as_sampler(sampler: Any, sampler_options: dict | None = None) -> Any:
    """A SAMPLER object from a name in SAMPLER_NAMES, a k-diffusion-style function, or an object
    that already has `sample(...)` (returned as it is)."""
    if isinstance(sampler, str):
        obj = sampler_object(sampler)
        if sampler_options:
            obj = KSampler(obj.sampler_function, {**obj.extra_options, **sampler_options}, obj.inpaint_options)
        return obj
    if hasattr(sampler, "sample") and not isinstance(sampler, types.FunctionType):
        return sampler
    return KSampler(sampler, sampler_options)


def cfg_guider(model: Any, positive: Any, negative: Any, cfg: float) -> CFGGuider:
    """The CFG guider KSampler and SamplerCustom sample with (ComfyUI `comfy.samplers.sample`)."""
    guider = CFGGuider(model)
    guider.set_conds(positive, negative)
    guider.set_cfg(cfg)
    return guider


def sample_custom(model: Any, noise: torch.Tensor, cfg: float, sampler: Any,
                  sigmas: torch.Tensor, positive: Any, negative: Any, latent_image: torch.Tensor,
                  noise_mask: torch.Tensor | None = None, callback: ProgressCallback | None = None,
                  disable_pbar: bool = False, seed: int | None = None,
                  sampler_options: dict | None = None) -> torch.Tensor:
    """Sample with any sigma list and sampler (a name, a k-diffusion-style function or a SAMPLER),
    as ComfyUI's `comfy.sample.sample_custom` (same signature, plus `sampler_options`).

    `model` is a ModelPatcher (`applied()` context, `model_options`); returns the latent in VAE
    space. Runs `comfy_core.sampling.ksampler.sample` (ComfyUI's `comfy.samplers.sample`), read
    through its module so a pack's replacement of it is what runs.
    """
    return _ksampler.sample(model, noise, positive, negative, cfg, getattr(model, "load_device", None),
                            as_sampler(sampler, sampler_options), sigmas, getattr(model, "model_options", None),
                            latent_image=latent_image, denoise_mask=noise_mask, callback=callback,
                            disable_pbar=disable_pbar, seed=seed)


def sample(model: Any, noise: torch.Tensor, steps: int, cfg: float, sampler_name: str, scheduler: str,
           positive: Any, negative: Any, latent_image: torch.Tensor, denoise: float = 1.0,
           disable_noise: bool = False, start_step: int | None = None, last_step: int | None = None,
           force_full_denoise: bool = False, noise_mask: torch.Tensor | None = None,
           sigmas: torch.Tensor | None = None, callback: ProgressCallback | None = None,
           disable_pbar: bool = False, seed: int | None = None) -> torch.Tensor:
    """KSampler semantics, ComfyUI's `comfy.sample.sample` (same signature; `disable_noise` is
    unused there too: callers pass zero noise). A `comfy_core.sampling.ksampler.KSampler` for the
    model and names, then its `sample`, looked up on the class at call time so that a pack's
    replacement of `comfy.samplers.KSampler.sample` runs. Unlike ComfyUI's class, which falls back
    to the first name, an unknown sampler or scheduler name is an error here."""
    sampler_function(sampler_name)  # fail early on an unknown name
    if sigmas is None and scheduler not in _schedulers.SCHEDULER_HANDLERS:
        raise _schedulers.UnknownSchedulerError(
            f"unknown scheduler {scheduler!r}; expected one of {', '.join(_schedulers.SCHEDULER_HANDLERS)}")
    ksampler = _ksampler.KSampler(model, steps=steps, device=getattr(model, "load_device", None), sampler=sampler_name,
                                  scheduler=scheduler, denoise=denoise, model_options=getattr(model, "model_options", None))
    return ksampler.sample(noise, positive, negative, cfg=cfg, latent_image=latent_image, start_step=start_step,
                           last_step=last_step, force_full_denoise=force_full_denoise, denoise_mask=noise_mask,
                           sigmas=sigmas, callback=callback, disable_pbar=disable_pbar, seed=seed)


def _model_sampling_of(model: Any) -> ModelSampling:
    """The model's sigma table without applying patches (a patch may replace it: honour that)."""
    getter = getattr(model, "get_model_object", None)
    if getter is not None:
        return getter("model_sampling")
    with model.applied() as dm:
        return dm.model_sampling
