"""GUIDER wire objects: the conditioning + guidance half of a sampling run.

After ComfyUI's `comfy.samplers.CFGGuider` and the guiders of comfy_extras/nodes_custom_sampler.py
(`Guider_Basic`, `Guider_DualCFG`): `set_conds(...)`, `set_cfg(...)`, then
`sample(noise, latent_image, sampler, sigmas, denoise_mask, callback, disable_pbar, seed)`. During
a run the guider is what sampler functions call (through `sampler_object.InpaintDenoiser`):
`guider(x, sigma, model_options=..., seed=...)` -> `predict_noise` (an x0 prediction, despite the
name, as ComfyUI). `inner_model` is the patched diffusion model while a run is on (None outside),
`model_patcher` the MODEL, `model_options` the patcher's options, `conds` the prepared entries.

KSampler, SamplerCustom and SamplerCustomAdvanced all sample through `CFGGuider.sample`.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from comfy_core.hooks.sampling import HOOK_RUN_OPTION, HookRun
from comfy_core.sampling.cfg import cfg_function, sampling_function
from comfy_core.sampling.cond_batch import calc_cond_batch, repeat_to_batch_size
from comfy_core.sampling.conditioning import (cleanup_control, cond_patchers, convert_cond, prepare_conds,
                                               prepare_control)

# callback(step, x0 [B,C,h,w], x [B,C,h,w], total_steps); may raise to stop sampling.
ProgressCallback = Callable[[int, torch.Tensor, torch.Tensor, int], None]


class SamplingError(ValueError):
    """Bad arguments to a sampling run (noise or latent shape, ...)."""


def prepare_mask(noise_mask: torch.Tensor, shape: torch.Size, device: torch.device) -> torch.Tensor:
    """A [B?, h, w] noise mask resized (bilinear) to the latent and repeated over channels/batch."""
    mask = noise_mask.reshape((-1, 1, noise_mask.shape[-2], noise_mask.shape[-1])).float()
    mask = F.interpolate(mask, size=(shape[2], shape[3]), mode="bilinear")
    mask = torch.cat([mask] * shape[1], dim=1)
    return repeat_to_batch_size(mask, shape[0]).to(device)


def process_latent_in(latent_format: Any, latent: torch.Tensor) -> torch.Tensor:
    """VAE latent -> model space: `(latent - shift) * scale`."""
    return (latent - getattr(latent_format, "shift_factor", 0.0)) * latent_format.scale_factor


def process_latent_out(latent_format: Any, latent: torch.Tensor) -> torch.Tensor:
    """Model space -> VAE latent: `latent / scale + shift`."""
    return latent / latent_format.scale_factor + getattr(latent_format, "shift_factor", 0.0)


def check_latent(dm: Any, latent: torch.Tensor) -> None:
    """A 4-D latent with the model's channel count."""
    if latent.ndim != 4:
        raise SamplingError(f"sampling: latent must be [batch, channels, height, width], got {tuple(latent.shape)}")
    channels = getattr(dm.latent_format, "channels", None) or getattr(dm.latent_format, "latent_channels", None)
    if channels is not None and latent.shape[1] != channels:
        raise SamplingError(f"sampling: the model expects {channels}-channel latents, got {latent.shape[1]} channels")


def _device_of(dm: Any) -> torch.device:
    try:
        return next(dm.parameters()).device
    except (AttributeError, StopIteration):
        return torch.device("cpu")


class CFGGuider:
    """Positive/negative conditioning with classifier-free guidance at scale `cfg` (default 1)."""

    def __init__(self, model_patcher: Any) -> None:
        self.model_patcher = model_patcher
        self.model_options: dict = getattr(model_patcher, "model_options", None) or {}
        self.original_conds: dict[str, list[dict]] = {}
        self.cfg = 1.0
        self.inner_model: Any = None
        self.conds: dict[str, list[dict]] = {}

    def set_conds(self, positive: Any, negative: Any) -> None:
        self.inner_set_conds({"positive": positive, "negative": negative})

    def set_cfg(self, cfg: float) -> None:
        self.cfg = cfg

    def inner_set_conds(self, conds: dict[str, Any]) -> None:
        """Store CONDITIONING lists as entries (`convert_cond`); they are prepared per run."""
        for key, value in conds.items():
            self.original_conds[key] = convert_cond(value, key)

    def __call__(self, x: torch.Tensor, timestep: torch.Tensor, model_options: dict | None = None,
                 seed: int | None = None) -> torch.Tensor:
        return self.predict_noise(x, timestep, self.model_options if model_options is None else model_options, seed)

    def predict_noise(self, x: torch.Tensor, timestep: torch.Tensor, model_options: dict,
                      seed: int | None = None) -> torch.Tensor:
        """The guided x0 prediction (ComfyUI's name)."""
        return sampling_function(self.inner_model, x, timestep, self.conds.get("negative"),
                                 self.conds.get("positive"), self.cfg, model_options)

    def sample(self, noise: torch.Tensor, latent_image: torch.Tensor, sampler: Any, sigmas: torch.Tensor,
               denoise_mask: torch.Tensor | None = None, callback: ProgressCallback | None = None,
               disable_pbar: bool = True, seed: int | None = None) -> torch.Tensor:
        """Run `sampler` over `sigmas` from `latent_image` + `noise`; the result in VAE latent space,
        float32, on the latent's device. The model's patches are on only inside the run."""
        if sigmas.shape[-1] == 0:
            return latent_image
        if noise.shape != latent_image.shape:
            raise SamplingError(f"sampling: noise shape {tuple(noise.shape)} != latent shape "
                                f"{tuple(latent_image.shape)}")
        base_options = dict(self.model_options)
        with self.model_patcher.applied() as dm:
            check_latent(dm, latent_image)
            device = _device_of(dm)
            noise_d = noise.to(device)
            latent = latent_image.to(device)
            sigmas = sigmas.to(device)
            if torch.count_nonzero(latent) > 0:  # an empty latent is left at 0
                latent = process_latent_in(dm.latent_format, latent)
            mask = prepare_mask(denoise_mask, noise_d.shape, device) if denoise_mask is not None else None
            conds = {k: [dict(e) for e in v] for k, v in self.original_conds.items()}
            # The conds' weight hooks (comfy_core/hooks): registered, and left only where registered.
            hook_run = HookRun.for_conds(self.model_patcher, conds)
            model_options = dict(base_options)
            model_options["transformer_options"] = {**base_options.get("transformer_options", {}),
                                                    "sample_sigmas": sigmas}
            if hook_run is not None:
                model_options[HOOK_RUN_OPTION] = hook_run
            self.inner_model = dm
            try:
                with contextlib.ExitStack() as stack:
                    # Models the conditioning carries (GLIGEN) run beside the UNet, on its device.
                    for patcher in cond_patchers(conds):
                        stack.enter_context(patcher.applied(device))
                    self.conds = prepare_conds(conds, noise_d, dm.model_sampling, getattr(dm, "encode_adm", None),
                                               concat_cond=getattr(dm, "concat_cond", None), latent_image=latent,
                                               denoise_mask=mask, seed=seed)
                    prepare_control(self.conds, dm)  # ControlNets: sigma ranges, lent to uncond
                    if hook_run is not None:
                        hook_run.start(dm.model_sampling)
                    extra_args = {"model_options": model_options, "seed": seed}
                    samples = sampler.sample(self, sigmas, extra_args, callback, noise_d, latent, mask, disable_pbar)
            finally:
                cleanup_control(self.conds)
                self.inner_model = None
                self.conds = {}
                if hook_run is not None:
                    hook_run.close()
            # Back to the caller's device (ComfyUI's intermediate device), in float32.
            return process_latent_out(dm.latent_format, samples.to(torch.float32)).to(latent_image.device)


class BasicGuider(CFGGuider):
    """One conditioning, no guidance (ComfyUI `Guider_Basic`)."""

    def set_conds(self, positive: Any) -> None:  # type: ignore[override]
        self.inner_set_conds({"positive": positive})


class DualCFGGuider(CFGGuider):
    """Two positives against one negative (ComfyUI `Guider_DualCFG`).

    regular: `cfg(middle vs negative, cfg2) + (cond1 - middle) * cfg1`, skipping the negative pass at
    cfg2 == 1 (and the middle one at cfg1 == 1 too), unless cfg1 optimisation is disabled;
    nested: `neg + cfg2 * (cfg(cond1 vs middle, cfg1) - neg)`. `middle` (cond2) is encoded as a
    negative prompt (its `prompt_type`).
    """

    def set_cfg(self, cfg1: float, cfg2: float, nested: bool = False) -> None:  # type: ignore[override]
        self.cfg1 = cfg1
        self.cfg2 = cfg2
        self.nested = nested

    def set_conds(self, positive: Any, middle: Any, negative: Any) -> None:  # type: ignore[override]
        middle = [[c[0], {**c[1], "prompt_type": "negative"}] for c in middle]
        self.inner_set_conds({"positive": positive, "middle": middle, "negative": negative})

    def predict_noise(self, x: torch.Tensor, timestep: torch.Tensor, model_options: dict,
                      seed: int | None = None) -> torch.Tensor:
        negative = self.conds.get("negative")
        middle = self.conds.get("middle")
        positive = self.conds.get("positive")
        model = self.inner_model
        if self.nested:
            out = calc_cond_batch(model.apply_model, [negative, middle, positive], x, timestep, model_options)
            pred_text = cfg_function(model, out[2], out[1], self.cfg1, x, timestep, model_options,
                                     cond=positive, uncond=middle)
            return out[0] + self.cfg2 * (pred_text - out[0])
        if not model_options.get("disable_cfg1_optimization", False) and math.isclose(self.cfg2, 1.0):
            negative = None
            if math.isclose(self.cfg1, 1.0):
                middle = None
        out = calc_cond_batch(model.apply_model, [negative, middle, positive], x, timestep, model_options)
        return (cfg_function(model, out[1], out[0], self.cfg2, x, timestep, model_options, cond=middle, uncond=negative)
                + (out[2] - out[1]) * self.cfg1)
