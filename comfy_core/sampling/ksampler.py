"""ComfyUI's `comfy.samplers.KSampler` object and `comfy.samplers.sample`: a schedule by name for a
number of steps, sampled with a CFG guider.

After ComfyUI's comfy/samplers.py. `KSampler(model, steps, device, sampler=None, scheduler=None,
denoise=None, model_options={})` computes `.sigmas` (`set_steps`: `steps + 1` sigmas with the
penultimate dropped for dpm_2*/uni_pc*, `denoise < 1` schedules `int(steps / denoise)` steps and
keeps the last `steps + 1`); `.sample(noise, positive, negative, cfg, ...)` windows them
(`start_step`, `last_step`, `force_full_denoise`) and calls this module's `sample`, which builds a
`CFGGuider` and runs it. An unknown sampler or scheduler name falls back to the first of the
list, as ComfyUI does.

The KSampler and KSamplerAdvanced nodes sample through this class (comfy_core.sampling.driver),
and call `KSampler.sample` and `sample` through the class and this module, so a pack that
replaces either (smZNodes, Easy-Use's BrushNet) changes what those nodes run, as in ComfyUI.
Importable without torch: packs read `KSampler.SAMPLERS` when they load, before torch is.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from comfy_core.sampling.samplers.registry import DISCARD_PENULTIMATE_SIGMA_SAMPLERS, SAMPLER_NAME_LIST
from comfy_core.sampling.scheduler_names import SCHEDULER_NAME_LIST

if TYPE_CHECKING:
    import torch


class KSampler:
    """A scheduled sampler for one model (ComfyUI's `comfy.samplers.KSampler`)."""

    # The live lists themselves (ComfyUI's `KSampler.SAMPLERS is SAMPLER_NAMES`): a name a pack
    # adds to either is offered by the built-in nodes.
    SCHEDULERS: list[str] = SCHEDULER_NAME_LIST
    SAMPLERS: list[str] = SAMPLER_NAME_LIST
    DISCARD_PENULTIMATE_SIGMA_SAMPLERS: set[str] = set(DISCARD_PENULTIMATE_SIGMA_SAMPLERS)

    def __init__(self, model: Any, steps: int, device: Any = None, sampler: str | None = None,
                 scheduler: str | None = None, denoise: float | None = None, model_options: dict | None = None) -> None:
        self.model = model
        self.device = device
        if scheduler not in self.SCHEDULERS:
            scheduler = self.SCHEDULERS[0]
        if sampler not in self.SAMPLERS:
            sampler = self.SAMPLERS[0]
        self.scheduler = scheduler
        self.sampler = sampler
        self.set_steps(steps, denoise)
        self.denoise = denoise
        self.model_options = {} if model_options is None else model_options

    def calculate_sigmas(self, steps: int) -> torch.Tensor:
        """The schedule for `steps` steps (one more, penultimate dropped, for dpm_2* / uni_pc*)."""
        import torch

        from comfy_core.sampling import schedulers

        discard_penultimate = self.sampler in self.DISCARD_PENULTIMATE_SIGMA_SAMPLERS
        if discard_penultimate:
            steps += 1
        sigmas = schedulers.calculate_sigmas(_model_sampling_of(self.model), self.scheduler, steps)
        if discard_penultimate:
            sigmas = torch.cat([sigmas[:-2], sigmas[-1:]])
        return sigmas

    def set_steps(self, steps: int, denoise: float | None = None) -> None:
        import torch

        self.steps = steps
        if denoise is None or denoise > 0.9999:
            self.sigmas = _to(self.calculate_sigmas(steps), self.device)
        elif denoise <= 0.0:
            self.sigmas = torch.FloatTensor([])
        else:
            self.sigmas = _to(self.calculate_sigmas(int(steps / denoise)), self.device)[-(steps + 1):]

    def sample(self, noise: torch.Tensor, positive: Any, negative: Any, cfg: float,
               latent_image: torch.Tensor | None = None, start_step: int | None = None, last_step: int | None = None,
               force_full_denoise: bool = False, denoise_mask: torch.Tensor | None = None,
               sigmas: torch.Tensor | None = None, callback: Any = None, disable_pbar: bool = False,
               seed: int | None = None) -> torch.Tensor:
        """Sample over `sigmas` (default `self.sigmas`) windowed to [start_step, last_step]; the
        latent in VAE space (`latent_image` as it is when the window is empty)."""
        import torch

        from comfy_core.sampling import sampler_object

        if sigmas is None:
            sigmas = self.sigmas
        if last_step is not None and last_step < len(sigmas) - 1:
            sigmas = sigmas[:last_step + 1]
            if force_full_denoise:
                sigmas = sigmas.clone()  # ComfyUI writes into a view of self.sigmas; we leave them intact
                sigmas[-1] = 0
        if start_step is not None:
            if start_step < len(sigmas) - 1:
                sigmas = sigmas[start_step:]
            elif latent_image is not None:
                return latent_image
            else:
                return torch.zeros_like(noise)
        sampler = sampler_object.sampler_object(self.sampler)
        return sample(self.model, noise, positive, negative, cfg, self.device, sampler, sigmas, self.model_options,
                      latent_image=latent_image, denoise_mask=denoise_mask, callback=callback,
                      disable_pbar=disable_pbar, seed=seed)


def sample(model: Any, noise: torch.Tensor, positive: Any, negative: Any, cfg: float, device: Any, sampler: Any,
           sigmas: torch.Tensor, model_options: dict | None = None, latent_image: torch.Tensor | None = None,
           denoise_mask: torch.Tensor | None = None, callback: Any = None, disable_pbar: bool = False,
           seed: int | None = None) -> torch.Tensor:
    """ComfyUI's `comfy.samplers.sample`: a `CFGGuider` over `positive`/`negative` at `cfg` runs
    the SAMPLER object `sampler` over `sigmas`. `device` and `model_options` are accepted as
    ComfyUI's are: the guider samples on the patcher's device with the patcher's options."""
    from comfy_core.sampling.guider import CFGGuider

    guider = CFGGuider(model)
    guider.set_conds(positive, negative)
    guider.set_cfg(cfg)
    return guider.sample(noise, latent_image, sampler, sigmas, denoise_mask, callback, disable_pbar, seed)


def _model_sampling_of(model: Any) -> Any:
    """The model's sigma table as patched (`get_model_object`), or read inside `applied()`."""
    getter = getattr(model, "get_model_object", None)
    if getter is not None:
        return getter("model_sampling")
    with model.applied() as dm:
        return dm.model_sampling


def _to(sigmas: torch.Tensor, device: Any) -> torch.Tensor:
    return sigmas if device is None else sigmas.to(device)
