"""GUIDER and SAMPLER wire objects: the conditioning + guidance half of a sampling run, and the
sampler function run on it.

After ComfyUI's `comfy.samplers` (`CFGGuider`, `Sampler`, `KSAMPLER`, `ksampler`, `sampler_object`,
`KSamplerX0Inpaint`) and the guiders of comfy_extras/nodes_custom_sampler.py (`Guider_Basic`,
`Guider_DualCFG`, 2026's `Guider_DualModel`): `set_conds(...)`, `set_cfg(...)`, then
`sample(noise, latent_image, sampler, sigmas, denoise_mask, callback, disable_pbar, seed)`. During
a run the guider is what sampler functions call (through `InpaintDenoiser`):
`guider(x, sigma, model_options=..., seed=...)` -> `predict_noise` (an x0 prediction, despite the
name, as ComfyUI). `inner_model` is the patched diffusion model while a run is on (None outside),
`model_patcher` the MODEL, `model_options` the patcher's options, `conds` the prepared entries.

KSampler, SamplerCustom and SamplerCustomAdvanced all sample through `CFGGuider.sample`, which
has ComfyUI's structure, so packs that subclass the guider or wrap its steps (KJNodes, Easy-Use,
AnimateDiff, Advanced-ControlNet) find the methods they override or wrap:
`sample` -> `outer_sample` (the `outer_sample` wrappers; model patched and on its device) ->
`inner_sample` (conditioning prepared; the SAMPLER object's `sample` under the `sampler_sample`
wrappers) -> `SamplerObject.sample` (start noise, the sampler function on `InpaintDenoiser`) and,
per model call, `__call__` -> `outer_predict_noise` (the `predict_noise` wrappers) ->
`predict_noise` -> `sampling_function` (comfy_core.sampling.cfg), or the host's replacement of it
(the `sampling_function` extension point, comfy_core/extension_points.py).
Wrappers come from the guider's `model_options` and the patcher's own `wrappers`, as ComfyUI's
`prepare_model_patcher` merges them.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F

from comfy_core import extension_points
from comfy_core.hooks.sampling import HOOK_RUN_OPTION, HookRun, register_option_hooks
from comfy_core.latent.nested import NestedTensor, is_nested, pack_latents, unpack_latents
from comfy_core.wrappers import WrappersMP, copy_nested_dicts, merge_nested_dicts, run_wrapped
from comfy_core.sampling import cfg as _cfg
from comfy_core.sampling import cond_batch as _cond_batch
from comfy_core.sampling.cond_batch import repeat_to_batch_size
from comfy_core.sampling.conditioning import (cleanup_control, cond_patchers, convert_cond, prepare_conds,
                                               prepare_control)
from comfy_core.sampling.noise import SEED_MASK
from comfy_core.sampling.samplers.registry import sampler_function

# callback(step, x0 [B,C,h,w], x [B,C,h,w], total_steps); may raise to stop sampling.
ProgressCallback = Callable[[int, torch.Tensor, torch.Tensor, int], None]


class SamplingError(ValueError):
    """Bad arguments to a sampling run (noise or latent shape, ...)."""


def prepare_mask(noise_mask: torch.Tensor, shape: torch.Size, device: torch.device) -> torch.Tensor:
    """A [B?, h, w] noise mask resized (bilinear) to the latent and repeated over channels/batch.
    For a video latent `[B, C, T, h, w]` the mask (`[B?, T?, h, w]` or 5-D) is resized trilinearly
    over frames, rows and columns (ComfyUI's `reshape_mask`); for a 1-D latent `[B, C, n]` (one
    part of a nested latent) linearly over its last axis."""
    if len(shape) == 3:
        mask = noise_mask.float()
        mask = mask.reshape((-1, 1, mask.shape[-1])) if mask.ndim < 3 else mask
        mask = F.interpolate(mask, size=(shape[2],), mode="linear")
        if mask.shape[1] < shape[1]:
            mask = mask.repeat((1, shape[1], 1))[:, :shape[1]]
        return repeat_to_batch_size(mask, shape[0]).to(device)
    if len(shape) == 5:
        mask = noise_mask.float()
        if mask.ndim < 5:
            mask = mask.reshape((1, 1, -1, mask.shape[-2], mask.shape[-1]))
        mask = F.interpolate(mask, size=tuple(shape[2:]), mode="trilinear")
        if mask.shape[1] < shape[1]:
            mask = mask.repeat((1, shape[1], 1, 1, 1))[:, :shape[1]]
        return repeat_to_batch_size(mask, shape[0]).to(device)
    mask = noise_mask.reshape((-1, 1, noise_mask.shape[-2], noise_mask.shape[-1])).float()
    mask = F.interpolate(mask, size=(shape[2], shape[3]), mode="bilinear")
    mask = torch.cat([mask] * shape[1], dim=1)
    return repeat_to_batch_size(mask, shape[0]).to(device)


def _per_channel(latent_format: Any) -> bool:
    """Whether a format normalises its own way: the 3-D (video) formats, and image formats with
    per-channel statistics (`latents_mean`, ComfyUI's attribute: Qwen-Image 2.1's)."""
    return (getattr(latent_format, "latent_dimensions", 2) == 3
            or getattr(latent_format, "latents_mean", None) is not None)


def process_latent_in(latent_format: Any, latent: torch.Tensor) -> torch.Tensor:
    """VAE latent -> model space: `(latent - shift) * scale`; formats normalised per channel
    (Wan's mean / std) by their own `process_in`."""
    if _per_channel(latent_format) and hasattr(latent_format, "process_in"):
        return latent_format.process_in(latent)
    return (latent - getattr(latent_format, "shift_factor", 0.0)) * latent_format.scale_factor


def process_latent_out(latent_format: Any, latent: torch.Tensor) -> torch.Tensor:
    """Model space -> VAE latent: `latent / scale + shift` (per-channel formats: their `process_out`)."""
    if _per_channel(latent_format) and hasattr(latent_format, "process_out"):
        return latent_format.process_out(latent)
    return latent / latent_format.scale_factor + getattr(latent_format, "shift_factor", 0.0)


def fit_empty_latent(latent_format: Any, latent: torch.Tensor, downscale_ratio_spacial: float | None = None,
                     downscale_ratio_temporal: float | None = None) -> Any:
    """ComfyUI's `comfy.sample.fix_empty_latent_channels`: an all-zero latent made for another
    format (EmptyLatentImage's 4 channels at 1/8 of the pixels) becomes the model's: widened to
    its channels; when the latent says at what ratio it was made (`downscale_ratio_spacial` /
    `_temporal` keys of the LATENT dict), resized to the model's ratio (a 1/8 latent for a 1/16
    model halves, nearest-exact as ComfyUI, which for zeros is only the new shape); a 4-D latent
    given a frame axis `[B, C, 1, h, w]` for a model with 3-D latents; then the format's own
    `fix_empty_latent` (MiniMax H3 builds its nested audio-video latent there). A latent with
    content keeps its channels and size (`check_latent` then refuses a mismatch); a nested latent
    is left as it is."""
    if is_nested(latent):
        return latent
    empty = torch.count_nonzero(latent) == 0
    if empty and latent.ndim >= 2:
        channels = getattr(latent_format, "latent_channels", None) or getattr(latent_format, "channels", None)
        shape = list(latent.shape)
        if channels is not None:
            shape[1] = channels
        model_spacial = getattr(latent_format, "spacial_downscale_ratio", 8)
        if downscale_ratio_spacial is not None and downscale_ratio_spacial != model_spacial and latent.ndim >= 4:
            ratio = downscale_ratio_spacial / model_spacial
            shape[-1], shape[-2] = round(shape[-1] * ratio), round(shape[-2] * ratio)
        if shape != list(latent.shape):
            latent = latent.new_zeros(shape)
    if getattr(latent_format, "latent_dimensions", 2) == 3 and latent.ndim == 4:
        latent = latent.unsqueeze(2)  # [B, C, 1, h, w]
    if empty and downscale_ratio_temporal is not None and latent.ndim >= 3:  # frames (audio: samples) on dim 2
        model_temporal = getattr(latent_format, "temporal_downscale_ratio", 1)
        if downscale_ratio_temporal != model_temporal:
            frames = max(1, round(latent.shape[2] * downscale_ratio_temporal / model_temporal))
            latent = latent.new_zeros((*latent.shape[:2], frames, *latent.shape[3:]))
    if empty and hasattr(latent_format, "fix_empty_latent"):
        latent = latent_format.fix_empty_latent(latent)
    return latent


def fit_latent_input(model: Any, latent: Mapping[str, Any]) -> dict:
    """A LATENT dict whose `samples` fit `model` (`fit_empty_latent`, with the dict's own
    `downscale_ratio_spacial` / `downscale_ratio_temporal`), as ComfyUI's samplers take it before
    generating noise for it; the input dict is not changed."""
    samples = fit_empty_latent(model.get_model_object("latent_format"), latent["samples"],
                               latent.get("downscale_ratio_spacial"), latent.get("downscale_ratio_temporal"))
    return latent if samples is latent["samples"] else {**latent, "samples": samples}


def check_latent(dm: Any, latent: torch.Tensor) -> None:
    """A 4-D latent (5-D `[B, C, T, h, w]` for video models, 3-D `[B, C, T]` for audio models) with
    the model's channel count."""
    dims = getattr(dm.latent_format, "latent_dimensions", 2) + 2
    if latent.ndim != dims:
        expected = {5: "[batch, channels, frames, height, width]", 3: "[batch, channels, frames]"}.get(
            dims, "[batch, channels, height, width]")
        raise SamplingError(f"sampling: latent must be {expected}, got {tuple(latent.shape)}")
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
        return self.outer_predict_noise(x, timestep, self.model_options if model_options is None else model_options, seed)

    def outer_predict_noise(self, x: torch.Tensor, timestep: torch.Tensor, model_options: dict | None = None,
                            seed: int | None = None) -> torch.Tensor:
        """`predict_noise` under the `predict_noise` wrappers (ComfyUI's name)."""
        options = {} if model_options is None else model_options
        return run_wrapped(WrappersMP.PREDICT_NOISE, self.model_options, self.predict_noise, x, timestep, options, seed,
                           class_obj=self)

    def predict_noise(self, x: torch.Tensor, timestep: torch.Tensor, model_options: dict | None = None,
                      seed: int | None = None) -> torch.Tensor:
        """The guided x0 prediction (ComfyUI's name)."""
        # model_options by keyword, as ComfyUI's CFGGuider.predict_noise: packs' replacements of
        # sampling_function read it from kwargs (smZNodes).
        guided = extension_points.current().sampling_function or _cfg.sampling_function
        return guided(self.inner_model, x, timestep, self.conds.get("negative"), self.conds.get("positive"), self.cfg,
                      model_options={} if model_options is None else model_options, seed=seed)

    def sample(self, noise: torch.Tensor, latent_image: torch.Tensor, sampler: Any, sigmas: torch.Tensor,
               denoise_mask: torch.Tensor | None = None, callback: ProgressCallback | None = None,
               disable_pbar: bool = True, seed: int | None = None) -> torch.Tensor:
        """Run `sampler` over `sigmas` from `latent_image` + `noise`; the result in VAE latent space,
        float32, on the latent's device. The model's patches are on only inside the run.

        A nested latent (comfy_core/latent/nested.py, LTX-2's [video, audio]) is sampled packed, as
        ComfyUI's `CFGGuider.sample` does: latent and noise flattened to one `[B, 1, N]` tensor, the
        parts' shapes handed on as `latent_shapes` (to `outer_sample`, `inner_sample` and the
        model's conditions, which give them to the network), the denoise mask prepared per part
        (ones for the parts without one) and packed alike, callbacks given nested x0 / x, and the
        result unpacked into a NestedTensor."""
        if sigmas.shape[-1] == 0:
            return latent_image
        latent_shapes = None
        if is_nested(latent_image):
            latent_image, noise, denoise_mask, callback, latent_shapes = _pack_run(latent_image, noise, denoise_mask,
                                                                                   callback)
        if noise.shape != latent_image.shape:
            raise SamplingError(f"sampling: noise shape {tuple(noise.shape)} != latent shape "
                                f"{tuple(latent_image.shape)}")
        self.conds = {k: [dict(e) for e in v] for k, v in self.original_conds.items()}
        orig_model_options = self.model_options
        self.model_options = self._run_options(orig_model_options)
        # Hooks that bring wrappers, callbacks or patches join the run's options before its
        # OUTER_SAMPLE wrappers are read, as in ComfyUI (weight hooks register in outer_sample).
        register_option_hooks(self.model_patcher, self.conds, self.model_options)
        # `latent_shapes` only for a packed run, so that a plain run calls overrides as before.
        packed = {} if latent_shapes is None else {"latent_shapes": latent_shapes}
        try:
            out = run_wrapped(WrappersMP.OUTER_SAMPLE, self.model_options, self.outer_sample, noise, latent_image,
                              sampler, sigmas, denoise_mask, callback, disable_pbar, seed, class_obj=self, **packed)
        finally:
            self.model_options = orig_model_options
            self.conds = {}
        return out if latent_shapes is None else NestedTensor(unpack_latents(out, latent_shapes))

    def _run_options(self, model_options: dict) -> dict:
        """A copy of `model_options` for one run, with the patcher's wrappers and callbacks merged
        into its `transformer_options` (ComfyUI's `prepare_model_patcher`)."""
        options = copy_nested_dicts(model_options)
        transformer_options = dict(options.get("transformer_options", {}))
        for name in ("wrappers", "callbacks"):
            own = getattr(self.model_patcher, name, None)
            if own:
                transformer_options[name] = merge_nested_dicts(transformer_options.get(name, {}), own)
        options["transformer_options"] = transformer_options
        return options

    def outer_sample(self, noise: torch.Tensor, latent_image: torch.Tensor, sampler: Any, sigmas: torch.Tensor,
                     denoise_mask: torch.Tensor | None = None, callback: ProgressCallback | None = None,
                     disable_pbar: bool = True, seed: int | None = None,
                     latent_shapes: list | None = None) -> torch.Tensor:
        """Patch the model and move the run's tensors to its device; `inner_sample` there; the
        result back on the latent's device (ComfyUI's intermediate device). With `latent_shapes`
        the tensors are a packed nested latent, its mask already prepared (`sample`)."""
        with self.model_patcher.applied() as dm:
            # a packed run: its first part (the video of LTX-2) is what the model's latent check reads
            check_latent(dm, latent_image if latent_shapes is None else unpack_latents(latent_image, latent_shapes)[0])
            device = _device_of(dm)
            noise_d = noise.to(device)
            latent = latent_image.to(device)
            sigmas = sigmas.to(device)
            if denoise_mask is None:
                mask = None
            elif latent_shapes is not None:
                mask = denoise_mask.to(device)
            else:
                mask = prepare_mask(denoise_mask, noise_d.shape, device)
            # The conds' weight hooks (comfy_core/hooks): registered, and left only where registered.
            hook_run = HookRun.for_conds(self.model_patcher, self.conds)
            if hook_run is not None:
                self.model_options[HOOK_RUN_OPTION] = hook_run
            self.inner_model = dm
            pre_run, cleanup = getattr(self.model_patcher, "pre_run", None), getattr(self.model_patcher, "cleanup", None)
            try:
                with contextlib.ExitStack() as stack:
                    def prepare(model: Any, noise_shape: Any, conds: Any, model_options: dict | None = None) -> tuple:
                        # ComfyUI's comfy.sampler_helpers._prepare_sampling: the models beside the
                        # UNet (the conditioning's GLIGEN, the patcher's additional models, e.g. a
                        # motion module) on its device, with their patches, for the run.
                        nested = getattr(model, "get_nested_additional_models", None)
                        models = cond_patchers(conds) + [m for m in (nested() if nested else ())
                                                         if hasattr(m, "applied")]
                        for patcher in models:
                            stack.enter_context(patcher.applied(device))
                        return dm, conds, models

                    # PREPARE_SAMPLING wrappers see (patcher, noise shape, conds), as in ComfyUI.
                    _, self.conds, models = run_wrapped(WrappersMP.PREPARE_SAMPLING, self.model_options, prepare,
                                                        self.model_patcher, noise_d.shape, self.conds,
                                                        model_options=self.model_options)
                    if callable(pre_run):
                        pre_run()
                    try:
                        packed = {} if latent_shapes is None else {"latent_shapes": latent_shapes}
                        samples = self.inner_sample(noise_d, latent, device, sampler, sigmas, mask, callback,
                                                    disable_pbar, seed, **packed)
                    finally:
                        if callable(cleanup):
                            cleanup()
                        # ComfyUI's cleanup_models: every model loaded for the run is cleaned up.
                        for patcher in models:
                            if callable(getattr(patcher, "cleanup", None)):
                                patcher.cleanup()
            finally:
                cleanup_control(self.conds)
                self.inner_model = None
                if hook_run is not None:
                    hook_run.close()
            return samples.to(latent_image.device)

    def inner_sample(self, noise: torch.Tensor, latent_image: torch.Tensor, device: torch.device, sampler: Any,
                     sigmas: torch.Tensor, denoise_mask: torch.Tensor | None, callback: ProgressCallback | None,
                     disable_pbar: bool, seed: int | None, latent_shapes: list | None = None) -> torch.Tensor:
        """Prepare the conditioning and run the sampler object (under the `sampler_sample`
        wrappers) on the patched model `self.inner_model`; model space in, VAE space out.
        `latent_shapes` (a packed nested latent) reaches the model's conditions."""
        dm = self.inner_model
        # A packed run's parts may enter model space at their own scale (MiniMax H3 carries its audio
        # at shift_video / shift_audio: ComfyUI's `MiniMaxH3.process_latent_in`); None: unscaled.
        part_scales = _packed_part_scales(dm, latent_shapes)
        if latent_image is not None and torch.count_nonzero(latent_image) > 0:  # an empty latent is left at 0
            latent_image = process_latent_in(dm.latent_format, latent_image)
            if part_scales is not None:
                latent_image = _scale_packed(latent_image, latent_shapes, part_scales)
        self.conds = prepare_conds(self.conds, noise, dm.model_sampling, getattr(dm, "encode_adm", None),
                                   concat_cond=getattr(dm, "concat_cond", None), latent_image=latent_image,
                                   denoise_mask=denoise_mask, seed=seed,
                                   extra_inputs=getattr(dm, "extra_inputs", None), latent_shapes=latent_shapes)
        prepare_control(self.conds, dm)  # ControlNets: sigma ranges, lent to uncond
        hook_run = self.model_options.get(HOOK_RUN_OPTION)
        if hook_run is not None:
            hook_run.start(dm.model_sampling)
        model_options = dict(self.model_options)
        model_options["transformer_options"] = {**self.model_options.get("transformer_options", {}),
                                                "sample_sigmas": sigmas}
        extra_args = {"model_options": model_options, "seed": seed}
        samples = run_wrapped(WrappersMP.SAMPLER_SAMPLE, model_options, sampler.sample, self, sigmas, extra_args,
                              callback, noise, latent_image, denoise_mask, disable_pbar, class_obj=sampler)
        samples = samples.to(torch.float32)
        if part_scales is not None:
            samples = _scale_packed(samples, latent_shapes, [1.0 / s for s in part_scales])
        return process_latent_out(dm.latent_format, samples)


def _packed_part_scales(dm: Any, latent_shapes: list | None) -> list[float] | None:
    """The model-space factors of a packed run's parts, from the model's conditions (None: none)."""
    own = getattr(getattr(dm, "conditions", None), "packed_part_scales", None)
    return None if latent_shapes is None or own is None else own(dm, latent_shapes)


def _scale_packed(packed: torch.Tensor, latent_shapes: list, scales: list[float]) -> torch.Tensor:
    """`packed` `[B, 1, N]` with each part multiplied by its factor."""
    parts = unpack_latents(packed, latent_shapes)
    return pack_latents([part * scale for part, scale in zip(parts, scales)])[0]


def _pack_run(latent_image: Any, noise: Any, denoise_mask: Any, callback: ProgressCallback | None) -> tuple:
    """A nested run's packed latent, noise and denoise mask, its callback (handed nested x0 / x)
    and the parts' shapes (ComfyUI's `CFGGuider.sample` for a nested latent)."""
    parts = latent_image.unbind()
    if not is_nested(noise):
        raise SamplingError(f"sampling: a nested latent of {len(parts)} parts needs nested noise, got a tensor "
                            f"{tuple(noise.shape)}")
    noises = noise.unbind()
    if [tuple(n.shape) for n in noises] != [tuple(p.shape) for p in parts]:
        raise SamplingError(f"sampling: noise shapes {[tuple(n.shape) for n in noises]} != latent shapes "
                            f"{[tuple(p.shape) for p in parts]}")
    packed, shapes = pack_latents(parts)
    packed_noise, _ = pack_latents(noises)
    mask = None
    if denoise_mask is not None:
        masks = list(denoise_mask.unbind())[:len(shapes)] if is_nested(denoise_mask) else [denoise_mask]
        masks += [torch.ones(shape) for shape in shapes[len(masks):]]  # a part without a mask is denoised whole
        mask = pack_latents([prepare_mask(m, shape, packed.device) for m, shape in zip(masks, shapes)])[0].float()
    if callback is not None:
        packed_callback = callback

        def callback(step: int, x0: torch.Tensor, x: torch.Tensor, total_steps: int) -> Any:
            nested_x0, nested_x = NestedTensor(unpack_latents(x0, shapes)), NestedTensor(unpack_latents(x, shapes))
            return packed_callback(step, nested_x0, nested_x, total_steps)
    return packed, packed_noise, mask, callback, shapes


# -- SAMPLER objects (ComfyUI `Sampler`, `KSAMPLER`, `KSamplerX0Inpaint`) -----------------------

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
        # ComfyUI's `scale_latent_inpaint`: the kept region re-noised to sigma, or left clean where
        # the model says so (Wan 2.2 TI2V's clean first frame).
        scale = getattr(self.inner_model.inner_model, "scale_latent_inpaint", None)
        renoised = (scale(x=x, sigma=s, noise=self.noise, latent_image=self.latent_image) if scale is not None
                    else self.model_sampling.noise_scaling(s, self.noise, self.latent_image))
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


class SamplerObject(Sampler):
    """A k-diffusion-style sampler function plus its keyword options (ComfyUI `KSAMPLER`).

    `inpaint_options={"random": True}` (ddim) re-noises the kept region of an inpaint with fresh
    noise drawn from seed + 1 instead of the starting noise.
    """

    def __init__(self, sampler_function: Callable[..., torch.Tensor], extra_options: dict | None = None,
                 inpaint_options: dict | None = None) -> None:
        self.sampler_function = sampler_function
        self.extra_options = dict(extra_options or {})
        self.inpaint_options = dict(inpaint_options or {})

    def sample(self, guider: Any, sigmas: torch.Tensor, extra_args: dict, callback: ProgressCallback | None,
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


def ksampler(sampler_name: str, extra_options: dict | None = None,
             inpaint_options: dict | None = None) -> SamplerObject:
    """The named sampler (one of SAMPLER_NAMES) with options (ComfyUI `comfy.samplers.ksampler`)."""
    return SamplerObject(sampler_function(sampler_name), extra_options, inpaint_options)


def sampler_object(name: str) -> SamplerObject:
    """KSamplerSelect's sampler for a name; ddim is euler with random inpaint noise, as ComfyUI."""
    if name == "ddim":
        return ksampler("euler", inpaint_options={"random": True})
    return ksampler(name)


def cfg_guider(model: Any, positive: Any, negative: Any, cfg: float) -> "CFGGuider":
    """The CFG guider KSampler and SamplerCustom sample with (ComfyUI `comfy.samplers.sample`'s)."""
    guider = CFGGuider(model)
    guider.set_conds(positive, negative)
    guider.set_cfg(cfg)
    return guider


# -- guiders beside CFGGuider --------------------------------------------------------------------

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

    def predict_noise(self, x: torch.Tensor, timestep: torch.Tensor, model_options: dict | None = None,
                      seed: int | None = None) -> torch.Tensor:
        model_options = {} if model_options is None else model_options
        negative = self.conds.get("negative")
        middle = self.conds.get("middle")
        positive = self.conds.get("positive")
        model = self.inner_model
        points = extension_points.current()
        calc_cond_batch = _cond_batch.calc_cond_batch_in_force()
        cfg_function = points.cfg_function or _cfg.cfg_function
        if self.nested:
            out = calc_cond_batch(model, [negative, middle, positive], x, timestep, model_options)
            pred_text = cfg_function(model, out[2], out[1], self.cfg1, x, timestep, model_options,
                                     cond=positive, uncond=middle)
            return out[0] + self.cfg2 * (pred_text - out[0])
        if not model_options.get("disable_cfg1_optimization", False) and math.isclose(self.cfg2, 1.0):
            negative = None
            if math.isclose(self.cfg1, 1.0):
                middle = None
        out = calc_cond_batch(model, [negative, middle, positive], x, timestep, model_options)
        return (cfg_function(model, out[1], out[0], self.cfg2, x, timestep, model_options, cond=middle, uncond=negative)
                + (out[2] - out[1]) * self.cfg1)


class DualModelGuider(CFGGuider):
    """CFG whose positive pass runs on `model_patcher` and negative pass on a second MODEL,
    `uncond_model_patcher` (today's ComfyUI `Guider_DualModel`, comfy_extras/
    nodes_custom_sampler.py; Ideogram 4's conditional + unconditional transformers).

    At a base `cfg` of 1 the second model is neither loaded nor called. Otherwise it is patched
    and placed for the run beside the first (with the negative conditioning's side models), the
    negative conditioning is prepared on it (its own latent format, ADM and concat inputs), and
    each step runs `cond = model(positive)`, `uncond = uncond_model(negative)` as two separate
    batches, combined by `cfg_function` (CFG hooks of the first MODEL included). A step whose
    `cfg` is 1 (a CFG override) runs the positive pass alone unless cfg1 optimisation is off.
    Both passes get the run's `model_options` and attention backend, the first MODEL's, as in
    ComfyUI (whose backend choice is one of those options): the second MODEL's weights, object
    patches and side models take part, its own options and backend do not. A second MODEL that
    shares the first's weights with other patches cannot be held at the same time
    (`PatchConflictError`); the same MODEL in both sockets is ordinary CFG in two batches.
    """

    def __init__(self, model_patcher: Any, uncond_model_patcher: Any) -> None:
        super().__init__(model_patcher)
        self.uncond_model_patcher = uncond_model_patcher
        self.uncond_inner: Any = None
        self._uncond_negative: list[dict] | None = None
        self._uncond_conds: list[dict] | None = None

    def outer_sample(self, noise: torch.Tensor, latent_image: torch.Tensor, sampler: Any, sigmas: torch.Tensor,
                     denoise_mask: torch.Tensor | None = None, callback: ProgressCallback | None = None,
                     disable_pbar: bool = True, seed: int | None = None,
                     latent_shapes: list | None = None) -> torch.Tensor:
        self.uncond_inner = None
        self._uncond_conds = None
        if math.isclose(self.cfg, 1.0):  # no negative pass at all: the second model stays unloaded
            return super().outer_sample(noise, latent_image, sampler, sigmas, denoise_mask, callback,
                                        disable_pbar, seed, latent_shapes=latent_shapes)
        negative = {"negative": [dict(e) for e in self.conds.get("negative", [])]}
        patcher = self.uncond_model_patcher
        with contextlib.ExitStack() as stack:
            udm = stack.enter_context(patcher.applied())
            device = _device_of(udm)
            nested = getattr(patcher, "get_nested_additional_models", None)
            for side in cond_patchers(negative) + [m for m in (nested() if nested else ()) if hasattr(m, "applied")]:
                stack.enter_context(side.applied(device))
            if callable(getattr(patcher, "pre_run", None)):
                patcher.pre_run()
            self.uncond_inner = udm
            self._uncond_negative = negative["negative"]
            try:
                return super().outer_sample(noise, latent_image, sampler, sigmas, denoise_mask, callback,
                                            disable_pbar, seed, latent_shapes=latent_shapes)
            finally:
                if self._uncond_conds is not None:
                    cleanup_control({"negative": self._uncond_conds})
                if callable(getattr(patcher, "cleanup", None)):
                    patcher.cleanup()
                self.uncond_inner = None
                self._uncond_negative = None
                self._uncond_conds = None

    def inner_sample(self, noise: torch.Tensor, latent_image: torch.Tensor, device: torch.device, sampler: Any,
                     sigmas: torch.Tensor, denoise_mask: torch.Tensor | None, callback: ProgressCallback | None,
                     disable_pbar: bool, seed: int | None, latent_shapes: list | None = None) -> torch.Tensor:
        udm = self.uncond_inner
        if udm is not None:
            latent = latent_image
            if latent is not None and torch.count_nonzero(latent) > 0:
                latent = process_latent_in(udm.latent_format, latent)
            prepared = prepare_conds({"negative": self._uncond_negative or []}, noise, udm.model_sampling,
                                     getattr(udm, "encode_adm", None), concat_cond=getattr(udm, "concat_cond", None),
                                     latent_image=latent, denoise_mask=denoise_mask, seed=seed,
                                     extra_inputs=getattr(udm, "extra_inputs", None), latent_shapes=latent_shapes)
            prepare_control(prepared, udm)
            self._uncond_conds = prepared["negative"]
        return super().inner_sample(noise, latent_image, device, sampler, sigmas, denoise_mask, callback,
                                    disable_pbar, seed, latent_shapes=latent_shapes)

    def predict_noise(self, x: torch.Tensor, timestep: torch.Tensor, model_options: dict | None = None,
                      seed: int | None = None) -> torch.Tensor:
        options = {} if model_options is None else model_options
        positive = self.conds.get("positive")
        calc_cond_batch = _cond_batch.calc_cond_batch_in_force()
        cond = calc_cond_batch(self.inner_model, [positive], x, timestep, options)[0]
        if self.uncond_inner is None or (math.isclose(self.cfg, 1.0)
                                         and not options.get("disable_cfg1_optimization", False)):
            return cond
        uncond = calc_cond_batch(self.uncond_inner, [self._uncond_conds], x, timestep, options)[0]
        cfg_function = extension_points.current().cfg_function or _cfg.cfg_function
        return cfg_function(self.inner_model, cond, uncond, self.cfg, x, timestep, options,
                            cond=positive, uncond=self._uncond_conds)
