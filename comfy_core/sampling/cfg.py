"""Classifier-free guidance on x0 predictions (the guider calls `sampling_function`, guider.py).

CFG (Ho & Salimans 2022, "Classifier-Free Diffusion Guidance") on denoised predictions:
`uncond + (cond - uncond) * cfg` (for eps/v models the same as guidance on eps, since x0 is affine
in eps at fixed x and sigma). At cfg == 1 the negative pass is skipped (ComfyUI's optimisation,
off when `model_options["disable_cfg1_optimization"]`). ComfyUI's `model_options` hooks are
honoured: `sampler_calc_cond_batch_function` (replaces the batching), `sampler_pre_cfg_function`
(list), `sampler_cfg_function` (noise-space), `sampler_post_cfg_function` (list), plus
`model_function_wrapper` (in cond_batch.py).

Composable diffusion (AUTOMATIC1111's AND; Liu et al. 2022): positive entries with a
`composable_weight` make the effective positive prediction `uncond + sum_i w_i (cond_i - uncond)`,
so CFG yields `uncond + cfg * sum_i w_i (cond_i - uncond)`; entries without it form one more term
of weight 1 (ComfyUI's averaged positive).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from comfy_core import extension_points
from comfy_core.sampling import cond_batch as _cond_batch


def cfg_combine(cond_pred: torch.Tensor, uncond_pred: torch.Tensor, cond_scale: float) -> torch.Tensor:
    """`uncond + (cond - uncond) * cond_scale` on x0 predictions."""
    return uncond_pred + (cond_pred - uncond_pred) * cond_scale


def composable_positive(uncond_pred: torch.Tensor, terms: list[tuple[torch.Tensor, torch.Tensor, float]],
                        plain: torch.Tensor | None) -> torch.Tensor:
    """Effective positive `uncond + sum_i w_i (cond_i - uncond)` (+ `plain - uncond` when present).

    A term contributes only where its area/mask covers (`coverage`), elsewhere it equals uncond.
    """
    out = uncond_pred.clone()
    for pred, coverage, weight in terms:
        out = out + torch.where(coverage, pred - uncond_pred, torch.zeros_like(pred)) * weight
    if plain is not None:
        out = out + (plain - uncond_pred)
    return out


def cfg_function(model: Any, cond_pred: torch.Tensor, uncond_pred: torch.Tensor, cond_scale: float,
                 x: torch.Tensor, timestep: torch.Tensor, model_options: dict | None = None,
                 cond: Any = None, uncond: Any = None) -> torch.Tensor:
    """ComfyUI's `cfg_function` (comfy/samplers.py, with its parameter names: `timestep` is the
    sigma): the custom CFG hook if any, then post-CFG hooks.

    `sampler_cfg_function(args)` works in noise space: it gets `cond`/`uncond` as `x - x0`
    predictions (plus the x0 ones as `cond_denoised`/`uncond_denoised`, `input` = x, `sigma` and
    `timestep` = sigma, the prepared conditioning as `input_cond`/`input_uncond`) and returns a
    noise prediction, turned back into `x - result`. Each `sampler_post_cfg_function(args)` gets
    the x0-space result so far as `denoised` and returns a new x0 prediction.
    """
    model_options = {} if model_options is None else model_options
    custom = model_options.get("sampler_cfg_function")
    if custom is not None:
        args = {"cond": x - cond_pred, "uncond": x - uncond_pred, "cond_scale": cond_scale, "timestep": timestep,
                "input": x, "sigma": timestep, "cond_denoised": cond_pred, "uncond_denoised": uncond_pred,
                "model": model, "model_options": model_options, "input_cond": cond, "input_uncond": uncond}
        result = x - custom(args)
    else:
        result = cfg_combine(cond_pred, uncond_pred, cond_scale)
    for fn in model_options.get("sampler_post_cfg_function", []):
        args = {"denoised": result, "cond": cond, "uncond": uncond, "cond_scale": cond_scale, "model": model,
                "uncond_denoised": uncond_pred, "cond_denoised": cond_pred, "sigma": timestep,
                "model_options": model_options, "input": x}
        result = fn(args)
    return result


def sampling_function(model: Any, x: torch.Tensor, timestep: torch.Tensor, uncond: list[dict] | None,
                      cond: list[dict] | None, cond_scale: float, model_options: dict | None = None,
                      seed: int | None = None) -> torch.Tensor:
    """The guided x0 prediction D(x, sigma) for prepared entries (ComfyUI `sampling_function`,
    same signature and parameter names: `timestep` is the sigma; `seed` is accepted and, as there,
    unused).

    `model.apply_model(x, sigma, c_crossattn=..., y=..., transformer_options=...) -> denoised`.
    `calc_cond_batch` and `cfg_function` are the ones of the extension points in force (a pack's
    `comfy.samplers.calc_cond_batch = f` / `cfg_function = f`: AnimateDiff, smZNodes), else ours;
    the guider reads this function itself the same way (`sampling_function` point).
    """
    sigma = timestep
    points = extension_points.current()
    calc_cond_batch = _cond_batch.calc_cond_batch_in_force()
    cfg = points.cfg_function or cfg_function
    model_options = {} if model_options is None else model_options
    skip_uncond = math.isclose(cond_scale, 1.0) and not model_options.get("disable_cfg1_optimization", False)
    composable = cond is not None and any("composable_weight" in e for e in cond)
    if composable:
        # The composable sum needs the negative prediction whatever the scale.
        terms, plain, uncond_pred = _cond_batch.calc_composable(model.apply_model, cond, uncond, x, sigma,
                                                                model_options)
        out = [composable_positive(uncond_pred, terms, plain), uncond_pred]
        uncond_ = uncond
    else:
        uncond_ = None if skip_uncond else uncond
        custom_batch = model_options.get("sampler_calc_cond_batch_function")
        if custom_batch is not None:
            out = custom_batch({"model": model, "conds": [cond, uncond_], "input": x, "sigma": sigma,
                                "model_options": model_options})
        else:
            out = calc_cond_batch(model, [cond, uncond_], x, sigma, model_options)
    conds = [cond, uncond_]
    for fn in model_options.get("sampler_pre_cfg_function", []):
        args = {"conds": conds, "conds_out": out, "cond_scale": cond_scale, "timestep": sigma, "input": x,
                "sigma": sigma, "model": model, "model_options": model_options}
        out = fn(args)
    return cfg(model, out[0], out[1], cond_scale, x, sigma, model_options, cond=cond, uncond=uncond_)

