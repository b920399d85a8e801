"""SAMPLER wire objects: a sampler function with its options, run on a guider.

After ComfyUI's `comfy/samplers.py` (`Sampler`, `KSAMPLER`, `ksampler`, `sampler_object`,
`KSamplerX0Inpaint`). `KSampler.sample(guider, sigmas, extra_args, callback, noise, latent_image,
denoise_mask, disable_pbar)` scales the noise to the first sigma (pure noise when the schedule
starts at the model's sigma_max), runs the function on the inpainting wrapper of the guider and
undoes the model's noise scaling at the end. The guider gives the model-space latent and noise.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

from comfy_core.sampling.noise import SEED_MASK
from comfy_core.sampling.samplers.registry import sampler_function

# callback(step, x0, x, total_steps)
StepReport = Callable[[int, torch.Tensor, torch.Tensor, int], None]


class InpaintDenoiser:
    """The denoiser handed to sampler functions: the guider, with the unmasked region held at the
    original latent re-noised to sigma when a denoise mask is given (ComfyUI `KSamplerX0Inpaint`).

    `inner_model` is the guider (so `model.inner_model.inner_model.model_sampling` and
    `model.inner_model.model_patcher` reach what ComfyUI-written samplers expect).
    """

    def __init__(self, guider: Any, sigmas: torch.Tensor, latent_image: torch.Tensor | None = None,
                 noise: torch.Tensor | None = None) -> None:
        # ComfyUI's `KSamplerX0Inpaint(model, sigmas)` has `latent_image` / `noise` set afterwards.
        self.inner_model = guider
        self.sigmas = sigmas
        self.latent_image = latent_image
        self.noise = noise

    @property
    def model_sampling(self) -> Any:
        return self.inner_model.inner_model.model_sampling

    def __call__(self, x: torch.Tensor, sigma: torch.Tensor, denoise_mask: torch.Tensor | None = None,
                 model_options: dict | None = None, seed: int | None = None, **_: Any) -> torch.Tensor:
        options = {} if model_options is None else model_options
        if denoise_mask is None:
            return self.inner_model(x, sigma, model_options=options, seed=seed)
        mask_fn = options.get("denoise_mask_function")
        if mask_fn is not None:
            denoise_mask = mask_fn(sigma, denoise_mask,
                                   extra_options={"model": self.inner_model, "sigmas": self.sigmas})
        keep = 1.0 - denoise_mask
        s = sigma.reshape([sigma.shape[0]] + [1] * (x.ndim - 1))
        renoised = self.model_sampling.noise_scaling(s, self.noise, self.latent_image)
        x = x * denoise_mask + renoised * keep
        out = self.inner_model(x, sigma, model_options=options, seed=seed)
        return out * denoise_mask + self.latent_image * keep


class Sampler:
    """The SAMPLER base class (ComfyUI's `comfy.samplers.Sampler`): `sample(...)` runs it on a
    guider, `max_denoise` says whether the schedule starts from pure noise. Packs subclass it and
    patch `max_denoise` on it (smZNodes), so our sampler objects look it up on the class."""

    def sample(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement Sampler.sample")

    def max_denoise(self, model_wrap: Any, sigmas: torch.Tensor) -> bool:
        """Whether the schedule starts at (or above) the model's sigma_max: start from pure noise."""
        max_sigma = float(model_wrap.inner_model.model_sampling.sigma_max)
        sigma = float(sigmas[0])
        return math.isclose(max_sigma, sigma, rel_tol=1e-05) or sigma > max_sigma


class KSampler(Sampler):
    """A k-diffusion-style sampler function plus its keyword options (ComfyUI `KSAMPLER`).

    `inpaint_options={"random": True}` (ddim) re-noises the kept region of an inpaint with fresh
    noise drawn from seed + 1 instead of the starting noise.
    """

    def __init__(self, sampler_function: Callable[..., torch.Tensor], extra_options: dict | None = None,
                 inpaint_options: dict | None = None) -> None:
        self.sampler_function = sampler_function
        self.extra_options = dict(extra_options or {})
        self.inpaint_options = dict(inpaint_options or {})

    def sample(self, guider: Any, sigmas: torch.Tensor, extra_args: dict, callback: StepReport | None,
               noise: torch.Tensor, latent_image: torch.Tensor | None = None,
               denoise_mask: torch.Tensor | None = None, disable_pbar: bool = True) -> torch.Tensor:
        ms = guider.inner_model.model_sampling
        extra_args = dict(extra_args)
        extra_args["denoise_mask"] = denoise_mask
        inpaint_noise = noise
        if self.inpaint_options.get("random", False):
            seed = extra_args.get("seed")
            gen = torch.Generator(device="cpu").manual_seed((int(41 if seed is None else seed) + 1) & SEED_MASK)
            inpaint_noise = torch.randn(noise.shape, generator=gen, device="cpu").to(noise.dtype).to(noise.device)
        denoiser = InpaintDenoiser(guider, sigmas, latent_image, inpaint_noise)
        x = ms.noise_scaling(sigmas[0], noise, latent_image, self.max_denoise(guider, sigmas))
        total = len(sigmas) - 1
        k_callback = None
        if callback is not None:
            def k_callback(info: dict) -> None:
                callback(info["i"], info["denoised"], info["x"], total)
        samples = self.sampler_function(denoiser, x, sigmas, extra_args=extra_args, callback=k_callback,
                                        disable=disable_pbar, **self.extra_options)
        return ms.inverse_noise_scaling(sigmas[-1], samples)


def ksampler(sampler_name: str, extra_options: dict | None = None, inpaint_options: dict | None = None) -> KSampler:
    """The named sampler (one of SAMPLER_NAMES) with options (ComfyUI `comfy.samplers.ksampler`)."""
    return KSampler(sampler_function(sampler_name), extra_options, inpaint_options)


def sampler_object(name: str) -> KSampler:
    """KSamplerSelect's sampler for a name; ddim is euler with random inpaint noise, as ComfyUI."""
    if name == "ddim":
        return ksampler("euler", inpaint_options={"random": True})
    return ksampler(name)
