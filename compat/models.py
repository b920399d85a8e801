"""`comfy.sd`, `comfy.samplers`, `comfy.sample` for packs, over comfy_core's loader and sampler.

ComfyUI's entry points of the same names (comfy/sd.py, comfy/samplers.py, comfy/sample.py);
the objects returned are ours (`ModelPatcher`, CLIP, `VaePatcher`), which the built-in nodes
accept, so a pack that loads a model itself and feeds it to KSampler works.

torch is imported inside the functions, and the name lists packs read at import time
(`KSampler.SAMPLERS`, `KSampler.SCHEDULERS`) come from the torch-free lists
(comfy_core.sampling.samplers.registry, comfy_core.sampling.scheduler_names): packs import
`comfy.samplers` and `comfy.sd` at the top, when they load at start-up, and start-up stays
torch-free (torch loads in the background once the server listens, web/warmup.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from comfy_core.sampling.samplers import registry as _samplers
from comfy_core.sampling.scheduler_names import SCHEDULER_NAMES
from compat.session import active

if TYPE_CHECKING:
    import torch


def _track(*patchers: Any) -> None:
    memory = getattr(active().env, "memory", None)
    if memory is None:
        return
    for patcher in patchers:
        if patcher is not None:
            memory.track(getattr(patcher, "patcher", patcher))


def load_checkpoint_guess_config(ckpt_path: str, output_vae: bool = True, output_clip: bool = True,
                                 output_clipvision: bool = False, embedding_directory: Any = None,
                                 output_model: bool = True, model_options: Mapping | None = None,
                                 te_model_options: Mapping | None = None) -> tuple[Any, Any, Any, Any]:
    """`(model, clip, vae, clipvision)`: the family is detected from the weights; CLIP vision is
    not provided (always None)."""
    from comfy_core.loading import load_checkpoint

    model, clip, vae = load_checkpoint(ckpt_path, output_vae=output_vae, output_clip=output_clip)
    _track(model, clip, vae)
    return (model if output_model else None), clip, vae, None


def load_lora_for_models(model: Any, clip: Any, lora: Mapping[str, torch.Tensor], strength_model: float,
                         strength_clip: float) -> tuple[Any, Any]:
    """Clones of `model` and `clip` with the LoRA state dict `lora` added as patches."""
    from comfy_core.lora.loader import load_lora_for_models as ours

    new_model, new_clip, _report = ours(model, clip, lora, strength_model, strength_clip)
    return new_model, new_clip


class KSampler:
    """Only the class attributes packs read: `KSampler.SAMPLERS`, `KSampler.SCHEDULERS`."""

    # mutable copies, as ComfyUI's attributes are (a pack may append its own names)
    SAMPLERS: list[str] = list(_samplers.SAMPLER_NAMES)
    SCHEDULERS: list[str] = list(SCHEDULER_NAMES)
    DISCARD_PENULTIMATE_SIGMA_SAMPLERS: set[str] = set(_samplers.DISCARD_PENULTIMATE_SIGMA_SAMPLERS)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("comfy.samplers.KSampler objects are not provided; use comfy.sample.sample "
                                  "or the KSampler node (nodes.KSampler().sample(...))")


def calculate_sigmas(model_sampling: Any, scheduler_name: str, steps: int) -> torch.Tensor:
    from comfy_core.sampling.schedulers import calculate_sigmas as ours

    return ours(model_sampling, scheduler_name, steps)


def prepare_noise(latent_image: torch.Tensor, seed: int, noise_inds: Any = None) -> torch.Tensor:
    from comfy_core.sampling.noise import prepare_noise as ours

    return ours(latent_image, seed, noise_inds)


def fix_empty_latent_channels(model: Any, latent_image: torch.Tensor) -> torch.Tensor:
    """ComfyUI widens an all-zero latent to the model's channels; our families are all 4-channel."""
    return latent_image


def sample(model: Any, noise: torch.Tensor, steps: int, cfg: float, sampler_name: str, scheduler: str,
           positive: Any, negative: Any, latent_image: torch.Tensor, denoise: float = 1.0,
           disable_noise: bool = False, start_step: int | None = None, last_step: int | None = None,
           force_full_denoise: bool = False, noise_mask: torch.Tensor | None = None, sigmas: Any = None,
           callback: Any = None, disable_pbar: bool = False, seed: int | None = None) -> torch.Tensor:
    """ComfyUI's `comfy.sample.sample`: the denoised latent `[B, C, h, w]`."""
    import torch

    from comfy_core.sampling.driver import sample as ours

    if disable_noise:
        noise = torch.zeros_like(latent_image)
    return ours(model, noise, steps, cfg, sampler_name, scheduler, positive, negative, latent_image, denoise=denoise,
                start_step=start_step, last_step=last_step, force_full_denoise=force_full_denoise,
                noise_mask=noise_mask, sigmas=sigmas, callback=callback, seed=seed)


# -- custom sampling (comfy.samplers.KSAMPLER / CFGGuider / ksampler / sampler_object, comfy.sample.sample_custom)

def runtime_class(name: str) -> type:
    """`comfy.samplers.KSAMPLER` / `CFGGuider`: our classes with ComfyUI's constructor signatures
    (`KSAMPLER(sampler_function, extra_options={}, inpaint_options={})`, `CFGGuider(model_patcher)`),
    resolved on first use so importing `comfy.samplers` stays torch-free."""
    if name == "KSAMPLER":
        from comfy_core.sampling.sampler_object import KSampler as ours

        return ours
    if name == "CFGGuider":
        from comfy_core.sampling.guider import CFGGuider

        return CFGGuider
    raise AttributeError(name)


def ksampler(sampler_name: str, extra_options: dict | None = None, inpaint_options: dict | None = None) -> Any:
    """ComfyUI's `comfy.samplers.ksampler`: a SAMPLER for a name with options."""
    from comfy_core.sampling.sampler_object import ksampler as ours

    return ours(sampler_name, extra_options, inpaint_options)


def sampler_object(name: str) -> Any:
    """ComfyUI's `comfy.samplers.sampler_object` (KSamplerSelect's SAMPLER)."""
    from comfy_core.sampling.sampler_object import sampler_object as ours

    return ours(name)


def sample_custom(model: Any, noise: torch.Tensor, cfg: float, sampler: Any, sigmas: torch.Tensor, positive: Any,
                  negative: Any, latent_image: torch.Tensor, noise_mask: torch.Tensor | None = None,
                  callback: Any = None, disable_pbar: bool = False, seed: int | None = None) -> torch.Tensor:
    """ComfyUI's `comfy.sample.sample_custom`: CFG sampling with a SAMPLER over SIGMAS."""
    from comfy_core.sampling.driver import sample_custom as ours

    return ours(model, noise, cfg, sampler, sigmas, positive, negative, latent_image, noise_mask=noise_mask,
                callback=callback, seed=seed)
