"""The sampling driver: from (model, noise, conditioning, schedule) to a denoised latent.

`sample(...)` has the semantics of ComfyUI's `comfy.sample.sample` + `comfy.samplers.KSampler`
(the KSampler and KSamplerAdvanced nodes call it); `sample_custom(...)` those of
`comfy.samplers.sample` / `CFGGuider.sample` (any sigma list, any sampler function).

Steps, all as ComfyUI does (`shared/reference/samplers.md` sections 3 and 6):
1. sigmas: the scheduler for `steps` (steps+1 with the penultimate dropped for dpm_2*, uni_pc*);
   `denoise < 1` schedules `int(steps/denoise)` and keeps the last steps+1; `start_step` /
   `last_step` slice, `force_full_denoise` ends at 0.
2. inside `with model.applied() as dm` (patches on, removed after, also on error or interrupt):
   a non-zero latent is scaled into model space; conditioning is prepared; the start is
   `latent + noise * sigma0` (or `* sqrt(1 + sigma0^2)` from pure noise);
3. the sampler runs on the CFG denoiser; the result is scaled back out of model space.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from comfy_core.sampling.cfg import GuidedDenoiser
from comfy_core.sampling.cond_batch import repeat_to_batch_size
from comfy_core.sampling.conditioning import convert_cond, prepare_conds
from comfy_core.sampling.model_sampling import ModelSampling
from comfy_core.sampling.noise import SEED_MASK
from comfy_core.sampling.samplers.registry import DISCARD_PENULTIMATE_SIGMA_SAMPLERS, sampler_function
from comfy_core.sampling.schedulers import calculate_sigmas

# callback(step, x0 [B,C,h,w], x [B,C,h,w], total_steps); may raise to stop sampling.
ProgressCallback = Callable[[int, torch.Tensor, torch.Tensor, int], None]


class SamplingError(ValueError):
    """Bad arguments to the sampling driver (steps, denoise, latent shape, ...)."""


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


def prepare_mask(noise_mask: torch.Tensor, shape: torch.Size, device: torch.device) -> torch.Tensor:
    """A [B?, h, w] noise mask resized (bilinear) to the latent and repeated over channels/batch."""
    mask = noise_mask.reshape((-1, 1, noise_mask.shape[-2], noise_mask.shape[-1])).float()
    mask = F.interpolate(mask, size=(shape[2], shape[3]), mode="bilinear")
    mask = torch.cat([mask] * shape[1], dim=1)
    return repeat_to_batch_size(mask, shape[0]).to(device)


# -- latent space ------------------------------------------------------------------------------

def process_latent_in(latent_format: Any, latent: torch.Tensor) -> torch.Tensor:
    """VAE latent -> model space: `(latent - shift) * scale`."""
    return (latent - getattr(latent_format, "shift_factor", 0.0)) * latent_format.scale_factor


def process_latent_out(latent_format: Any, latent: torch.Tensor) -> torch.Tensor:
    """Model space -> VAE latent: `latent / scale + shift`."""
    return latent / latent_format.scale_factor + getattr(latent_format, "shift_factor", 0.0)


def _check_latent(dm: Any, latent: torch.Tensor) -> None:
    if latent.ndim != 4:
        raise SamplingError(f"sampling: latent must be [batch, channels, height, width], got {tuple(latent.shape)}")
    channels = getattr(dm.latent_format, "channels", None) or getattr(dm.latent_format, "latent_channels", None)
    if channels is not None and latent.shape[1] != channels:
        raise SamplingError(f"sampling: the model expects {channels}-channel latents, got {latent.shape[1]} channels")


# -- the driver --------------------------------------------------------------------------------

def sample_custom(model: Any, noise: torch.Tensor, cfg: float, sampler: str | Callable[..., torch.Tensor],
                  sigmas: torch.Tensor, positive: Any, negative: Any, latent_image: torch.Tensor,
                  noise_mask: torch.Tensor | None = None, callback: ProgressCallback | None = None,
                  seed: int | None = None, sampler_options: dict | None = None) -> torch.Tensor:
    """Sample with any sigma list and sampler (a name in SAMPLER_NAMES or a k-diffusion-style function).

    `model` is a ModelPatcher (`applied()` context, `model_options`); returns the latent in VAE space.
    """
    if sigmas.shape[-1] == 0:
        return latent_image
    if noise.shape != latent_image.shape:
        raise SamplingError(f"sampling: noise shape {tuple(noise.shape)} != latent shape {tuple(latent_image.shape)}")
    sampler_name = sampler if isinstance(sampler, str) else None
    sampler_fn = sampler_function(sampler) if isinstance(sampler, str) else sampler
    conds = {"positive": convert_cond(positive, "positive"), "negative": convert_cond(negative, "negative")}
    base_options = dict(getattr(model, "model_options", {}) or {})
    with model.applied() as dm:
        _check_latent(dm, latent_image)
        device = _device_of(dm)
        ms = dm.model_sampling
        noise = noise.to(device)
        latent = latent_image.to(device)
        sigmas = sigmas.to(device)
        if torch.count_nonzero(latent) > 0:  # an empty latent is left at 0
            latent = process_latent_in(dm.latent_format, latent)
        mask = prepare_mask(noise_mask, noise.shape, device) if noise_mask is not None else None
        prepared = prepare_conds(conds, noise, ms, getattr(dm, "encode_adm", None))
        model_options = dict(base_options)
        model_options["transformer_options"] = {**base_options.get("transformer_options", {}), "sample_sigmas": sigmas}
        inpaint_noise = noise
        if sampler_name == "ddim" and mask is not None:
            # ComfyUI's ddim re-noises the kept region with fresh noise from seed + 1.
            gen = torch.Generator(device="cpu").manual_seed((int(seed if seed is not None else 41) + 1) & SEED_MASK)
            inpaint_noise = torch.randn(noise.shape, generator=gen, device="cpu").to(noise.dtype).to(device)
        denoiser = GuidedDenoiser(dm, prepared["positive"], prepared["negative"], cfg, model_options,
                                  latent_image=latent, noise=inpaint_noise, model_patcher=model)
        x = ms.noise_scaling(sigmas[0], noise, latent, ms.is_max_denoise(sigmas[0]))
        total = len(sigmas) - 1
        k_callback = None
        if callback is not None:
            def k_callback(info: dict) -> None:
                callback(info["i"], info["denoised"], info["x"], total)
        extra_args = {"model_options": model_options, "seed": seed, "denoise_mask": mask}
        samples = sampler_fn(denoiser, x, sigmas, extra_args=extra_args, callback=k_callback, disable=True,
                             **(sampler_options or {}))
        samples = ms.inverse_noise_scaling(sigmas[-1], samples)
        # Back to the caller's device (ComfyUI's intermediate device), in float32.
        return process_latent_out(dm.latent_format, samples.to(torch.float32)).to(latent_image.device)


def sample(model: Any, noise: torch.Tensor, steps: int, cfg: float, sampler_name: str, scheduler: str,
           positive: Any, negative: Any, latent_image: torch.Tensor, *, denoise: float = 1.0,
           start_step: int | None = None, last_step: int | None = None, force_full_denoise: bool = False,
           noise_mask: torch.Tensor | None = None, sigmas: torch.Tensor | None = None,
           callback: ProgressCallback | None = None, seed: int | None = None) -> torch.Tensor:
    """KSampler semantics (ComfyUI `comfy.sample.sample`): schedule by name, then `sample_custom`."""
    sampler_function(sampler_name)  # fail early on an unknown name
    if sigmas is None:
        ms = _model_sampling_of(model)
        sigmas = ksampler_sigmas(ms, steps, sampler_name, scheduler, denoise)
    window = slice_sigmas(sigmas, start_step, last_step, force_full_denoise)
    if window is None:
        return latent_image
    return sample_custom(model, noise, cfg, sampler_name, window, positive, negative, latent_image,
                         noise_mask=noise_mask, callback=callback, seed=seed)


def _model_sampling_of(model: Any) -> ModelSampling:
    """The model's sigma table without applying patches (a patch may replace it: honour that)."""
    getter = getattr(model, "get_model_object", None)
    if getter is not None:
        return getter("model_sampling")
    with model.applied() as dm:
        return dm.model_sampling


def _device_of(dm: Any) -> torch.device:
    try:
        return next(dm.parameters()).device
    except (AttributeError, StopIteration):
        return torch.device("cpu")
