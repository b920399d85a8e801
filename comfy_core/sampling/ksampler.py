"""Sampling by steps and names: ComfyUI's `comfy.sample.sample` / `sample_custom`, the
`comfy.samplers.KSampler` helper and `comfy.samplers.sample`; the KSampler nodes' entry.

After ComfyUI's comfy/sample.py and comfy/samplers.py. `sample(model, noise, steps, cfg,
sampler_name, scheduler, positive, negative, latent_image, ...)` makes a `KSampler` for the model
and names and runs its `sample`; `KSampler(model, steps, device, sampler, scheduler, denoise,
model_options)` computes `.sigmas` (`ksampler_sigmas`: `steps + 1` sigmas with the penultimate
dropped for dpm_2*/uni_pc*, `denoise < 1` schedules `int(steps / denoise)` steps and keeps the last
`steps + 1`); `.sample(noise, positive, negative, cfg, ...)` windows them (`slice_sigmas`:
`start_step`, `last_step`, `force_full_denoise`) and calls `guided_sample`, which builds a
`CFGGuider` over a SAMPLER object for the name and runs it (comfy_core/sampling/guider.py).

A host's replacements (comfy_core/extension_points.py) are read where ComfyUI calls through a
module or class: `KSampler.sample` (`ksampler_sample`, given the KSampler as `self`) and
`comfy.samplers.sample` (`sample`); the nodes read `comfy.sample.sample` (`sample_steps`).
An unknown sampler or scheduler name given to the class falls back to the first of the names on
offer, as ComfyUI does; `sample` refuses it.
Importable without torch: packs read the names (through compat) when they load, before torch is.
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, Callable

from comfy_core import extension_points
from comfy_core.sampling.samplers.registry import DISCARD_PENULTIMATE_SIGMA_SAMPLERS, sampler_function, sampler_names
from comfy_core.sampling.scheduler_names import scheduler_names

if TYPE_CHECKING:
    import torch

    from comfy_core.models.model_sampling import ModelSampling

# callback(step, x0 [B,C,h,w], x [B,C,h,w], total_steps); may raise to stop sampling.
ProgressCallback = Callable[[int, "torch.Tensor", "torch.Tensor", int], None]


# -- sigma selection (pure) --------------------------------------------------------------------

def ksampler_sigmas(model_sampling: ModelSampling, steps: int, sampler_name: str, scheduler: str,
                    denoise: float | None = 1.0) -> torch.Tensor:
    """KSampler's sigma list for `steps` and `denoise` (ComfyUI `KSampler.set_steps`)."""
    import torch

    from comfy_core.sampling.guider import SamplingError
    from comfy_core.sampling.schedulers import calculate_sigmas

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
    """KSamplerAdvanced's window on the schedule; None when `start_step` leaves nothing to do.
    The input is left intact (ComfyUI writes the final 0 into a view of `KSampler.sigmas`)."""
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


# -- the KSampler helper -----------------------------------------------------------------------

class KSampler:
    """A scheduled sampler for one model (ComfyUI's `comfy.samplers.KSampler`)."""

    DISCARD_PENULTIMATE_SIGMA_SAMPLERS: frozenset[str] = DISCARD_PENULTIMATE_SIGMA_SAMPLERS

    def __init__(self, model: Any, steps: int, device: Any = None, sampler: str | None = None,
                 scheduler: str | None = None, denoise: float | None = None, model_options: dict | None = None) -> None:
        self.model = model
        self.device = device
        schedulers, samplers = scheduler_names(), sampler_names()
        self.scheduler = scheduler if scheduler in schedulers else schedulers[0]
        self.sampler = sampler if sampler in samplers else samplers[0]
        self.set_steps(steps, denoise)
        self.denoise = denoise
        self.model_options = {} if model_options is None else model_options

    def calculate_sigmas(self, steps: int) -> torch.Tensor:
        """The full schedule for `steps` steps (one more, penultimate dropped, for dpm_2* / uni_pc*)."""
        return ksampler_sigmas(_model_sampling_of(self.model), steps, self.sampler, self.scheduler)

    def set_steps(self, steps: int, denoise: float | None = None) -> None:
        self.steps = steps
        sigmas = ksampler_sigmas(_model_sampling_of(self.model), steps, self.sampler, self.scheduler, denoise)
        self.sigmas = sigmas if self.device is None or len(sigmas) == 0 else sigmas.to(self.device)

    def sample(self, noise: torch.Tensor, positive: Any, negative: Any, cfg: float,
               latent_image: torch.Tensor | None = None, start_step: int | None = None, last_step: int | None = None,
               force_full_denoise: bool = False, denoise_mask: torch.Tensor | None = None,
               sigmas: torch.Tensor | None = None, callback: Any = None, disable_pbar: bool = False,
               seed: int | None = None) -> torch.Tensor:
        """Sample over `sigmas` (default `self.sigmas`) windowed to [start_step, last_step]; the
        latent in VAE space (`latent_image` as it is when the window is empty)."""
        from comfy_core.sampling.guider import sampler_object

        window = slice_sigmas(self.sigmas if sigmas is None else sigmas, start_step, last_step, force_full_denoise)
        if window is None:
            if latent_image is not None:
                return latent_image
            import torch

            return torch.zeros_like(noise)
        guided = extension_points.current().sample or guided_sample
        return guided(self.model, noise, positive, negative, cfg, self.device, sampler_object(self.sampler), window,
                      self.model_options, latent_image=latent_image, denoise_mask=denoise_mask, callback=callback,
                      disable_pbar=disable_pbar, seed=seed)


# -- entry points ------------------------------------------------------------------------------

def sample(model: Any, noise: torch.Tensor, steps: int, cfg: float, sampler_name: str, scheduler: str,
           positive: Any, negative: Any, latent_image: torch.Tensor, denoise: float = 1.0,
           disable_noise: bool = False, start_step: int | None = None, last_step: int | None = None,
           force_full_denoise: bool = False, noise_mask: torch.Tensor | None = None,
           sigmas: torch.Tensor | None = None, callback: ProgressCallback | None = None,
           disable_pbar: bool = False, seed: int | None = None) -> torch.Tensor:
    """KSampler semantics, ComfyUI's `comfy.sample.sample` (same signature; `disable_noise` is
    unused there too: callers pass zero noise). `model` is a ModelPatcher; returns the latent in
    VAE space. A `KSampler` for the model and names, then its `sample` (the host's replacement of
    `KSampler.sample` if any). Unlike ComfyUI's class, which falls back to the first name, an
    unknown sampler or scheduler name is an error here."""
    from comfy_core.sampling.schedulers import UnknownSchedulerError, scheduler_handlers

    sampler_function(sampler_name)  # fail early on an unknown name
    handlers = scheduler_handlers()
    if sigmas is None and scheduler not in handlers:
        raise UnknownSchedulerError(f"unknown scheduler {scheduler!r}; expected one of {', '.join(handlers)}")
    ksampler = KSampler(model, steps=steps, device=getattr(model, "load_device", None), sampler=sampler_name,
                        scheduler=scheduler, denoise=denoise, model_options=getattr(model, "model_options", None))
    run = extension_points.current().ksampler_sample or KSampler.sample
    return run(ksampler, noise, positive, negative, cfg=cfg, latent_image=latent_image, start_step=start_step,
               last_step=last_step, force_full_denoise=force_full_denoise, denoise_mask=noise_mask, sigmas=sigmas,
               callback=callback, disable_pbar=disable_pbar, seed=seed)


def sample_custom(model: Any, noise: torch.Tensor, cfg: float, sampler: Any, sigmas: torch.Tensor, positive: Any,
                  negative: Any, latent_image: torch.Tensor, noise_mask: torch.Tensor | None = None,
                  callback: ProgressCallback | None = None, disable_pbar: bool = False, seed: int | None = None,
                  sampler_options: dict | None = None) -> torch.Tensor:
    """Sample with any sigma list and sampler (a name, a k-diffusion-style function or a SAMPLER),
    as ComfyUI's `comfy.sample.sample_custom` (same signature, plus `sampler_options`): the
    host's `comfy.samplers.sample` or `guided_sample`."""
    guided = extension_points.current().sample or guided_sample
    return guided(model, noise, positive, negative, cfg, getattr(model, "load_device", None),
                  as_sampler(sampler, sampler_options), sigmas, getattr(model, "model_options", None),
                  latent_image=latent_image, denoise_mask=noise_mask, callback=callback, disable_pbar=disable_pbar,
                  seed=seed)


def guided_sample(model: Any, noise: torch.Tensor, positive: Any, negative: Any, cfg: float, device: Any,
                  sampler: Any, sigmas: torch.Tensor, model_options: dict | None = None,
                  latent_image: torch.Tensor | None = None, denoise_mask: torch.Tensor | None = None,
                  callback: Any = None, disable_pbar: bool = False, seed: int | None = None) -> torch.Tensor:
    """ComfyUI's `comfy.samplers.sample`: a `CFGGuider` over `positive`/`negative` at `cfg` runs
    the SAMPLER object `sampler` over `sigmas`. `device` and `model_options` are accepted as
    ComfyUI's are: the guider samples on the patcher's device with the patcher's options."""
    from comfy_core.sampling.guider import cfg_guider

    guider = cfg_guider(model, positive, negative, cfg)
    return guider.sample(noise, latent_image, sampler, sigmas, denoise_mask, callback, disable_pbar, seed)


def as_sampler(sampler: Any, sampler_options: dict | None = None) -> Any:
    """A SAMPLER object from a name in SAMPLER_NAMES, a k-diffusion-style function, or an object
    that already has `sample(...)` (returned as it is)."""
    from comfy_core.sampling.guider import SamplerObject, sampler_object

    if isinstance(sampler, str):
        obj = sampler_object(sampler)
        if sampler_options:
            obj = SamplerObject(obj.sampler_function, {**obj.extra_options, **sampler_options}, obj.inpaint_options)
        return obj
    if hasattr(sampler, "sample") and not isinstance(sampler, types.FunctionType):
        return sampler
    return SamplerObject(sampler, sampler_options)


def _model_sampling_of(model: Any) -> ModelSampling:
    """The model's sigma table without applying patches (a patch may replace it: honour that)."""
    getter = getattr(model, "get_model_object", None)
    if getter is not None:
        return getter("model_sampling")
    with model.applied() as dm:
        return dm.model_sampling
