"""ComfyUI's `comfy.sampler_helpers` and the `comfy.sample` helpers, over our runtime.

After comfy/sampler_helpers.py and comfy/sample.py (0.3.64). What ComfyUI does there to load
models onto the GPU before a run is, here, done by `ModelPatcher.applied()` inside the guider's
`outer_sample`; `prepare_sampling`, which hands back the loaded model outside any such context,
is therefore a typed error rather than a model without its patches.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


class UnsupportedSamplingHelper(NotImplementedError):
    """A ComfyUI sampling helper whose contract our runtime cannot honour."""


def convert_cond(cond: Any) -> list[dict]:
    """CONDITIONING `[[tensor, dict], ...]` to entry dicts (`cross_attn`, `model_conds`, `uuid`)."""
    from comfy_core.sampling.conditioning import convert_cond as ours

    return ours(cond, "conditioning")


def prepare_mask(noise_mask: torch.Tensor, shape: Any, device: Any) -> torch.Tensor:
    """A noise mask resized to the latent `shape` and repeated over its channels and batch."""
    from comfy_core.sampling.guider import prepare_mask as ours

    return ours(noise_mask, shape, device)


def get_models_from_cond(cond: list[dict], model_type: str) -> list[Any]:
    """The values of `model_type` ("control", "gligen", ...) over the entries, lists flattened."""
    models: list[Any] = []
    for c in cond:
        if model_type in c:
            value = c[model_type]
            models += value if isinstance(value, list) else [value]
    return models


def get_additional_models(conds: dict[str, list[dict]], dtype: Any) -> tuple[list[Any], int]:
    """`(models, inference_memory)` of the models the conditioning carries: ControlNets' models,
    GLIGEN models and `additional_models` (ComfyUI's `get_additional_models`)."""
    controls: list[Any] = []
    gligen: list[Any] = []
    extra: list[Any] = []
    for entries in conds.values():
        controls += get_models_from_cond(entries, "control")
        gligen += get_models_from_cond(entries, "gligen")
        extra += get_models_from_cond(entries, "additional_models")
    models: list[Any] = []
    memory = 0
    seen: set[int] = set()
    for control in controls:
        if id(control) in seen:
            continue
        seen.add(id(control))
        get_models = getattr(control, "get_models", None)
        models += list(get_models()) if callable(get_models) else []
        needs = getattr(control, "inference_memory_requirements", None)
        memory += int(needs(dtype)) if callable(needs) else 0
    return models + [g[1] for g in gligen] + extra, memory


def cleanup_additional_models(models: Any) -> None:
    """`cleanup()` on each model that has one (ComfyUI's `sampler_helpers.cleanup_additional_models`)."""
    for m in models:
        cleanup = getattr(m, "cleanup", None)
        if callable(cleanup):
            cleanup()


def cleanup_models(conds: dict[str, list[dict]], models: Any) -> None:
    """Clean up `models` and every ControlNet the conditioning carries."""
    cleanup_additional_models(models)
    controls: dict[int, Any] = {}
    for entries in conds.values():
        for control in get_models_from_cond(entries, "control"):
            controls[id(control)] = control
    cleanup_additional_models(controls.values())


def estimate_memory(model: Any, noise_shape: Any, conds: dict[str, list[dict]]) -> tuple[int, int]:
    """`(memory for a cond+uncond batch, for one)` in bytes, from the model's `memory_required`."""
    inner = getattr(model, "model", model)
    required = getattr(inner, "memory_required", None)
    if not callable(required):
        raise UnsupportedSamplingHelper(
            f"comfy.sampler_helpers.estimate_memory: {type(inner).__name__} has no memory_required(input_shape)")
    shape = list(noise_shape)
    return required([shape[0] * 2] + shape[1:]), required(shape)


def prepare_sampling(model: Any, noise_shape: Any, conds: Any, model_options: dict | None = None) -> Any:
    raise UnsupportedSamplingHelper(
        "comfy.sampler_helpers.prepare_sampling is not supported: this engine patches and loads the model "
        "only inside a sampling run (ModelPatcher.applied()); sample with comfy.samplers.CFGGuider(model).sample(...) "
        "or wrap its 'outer_sample' step instead")


# -- comfy.sample ----------------------------------------------------------------------------------

def fix_empty_latent_channels(model: Any, latent_image: torch.Tensor, downscale_ratio_spacial: Any = None,
                              downscale_ratio_temporal: Any = None) -> Any:
    """An all-zero latent made to the model's format: its channels, and its size when the ratio it
    was made at is given (ComfyUI's function, today's signature); others as they are."""
    from comfy_core.sampling.guider import fit_empty_latent

    return fit_empty_latent(model.get_model_object("latent_format"), latent_image, downscale_ratio_spacial,
                            downscale_ratio_temporal)


def sample_prepare_sampling(model: Any, noise_shape: Any, positive: Any, negative: Any, noise_mask: Any) -> tuple:
    """`comfy.sample.prepare_sampling`, deprecated in ComfyUI, which returns its inputs and logs so."""
    log.warning("comfy.sample.prepare_sampling isn't used anymore and can be removed")
    return model, positive, negative, noise_mask, []


def sample_cleanup_additional_models(models: Any) -> None:
    """`comfy.sample.cleanup_additional_models`: ComfyUI's does nothing but log (deprecated)."""
    log.warning("comfy.sample.cleanup_additional_models isn't used anymore and can be removed")
