"""`comfy.samplers`' replaceable functions called by keyword with ComfyUI's parameter names
(survey finding a13): sd-perturbed-attention's SlidingWindowGuidanceAdvanced binds
`partial(calc_cond_batch, model=..., conds=[cond], timestep=sigma, model_options=...)` and calls it
with `x_in=`; ComfyUI's `sampling_function(model, x, timestep, ...)` and
`cfg_function(..., x, timestep, model_options={}, ...)` are reached the same way."""
from __future__ import annotations

from functools import partial

import torch


def apply_model(x, sigma, c_crossattn=None, transformer_options=None, **_):
    # 2 * x plus each batch item's entry value times sigma: every argument shows in the result
    return x * 2.0 + c_crossattn.mean(dim=(1, 2)).view(-1, 1, 1, 1) * sigma.view(-1, 1, 1, 1)


def entries(value: float) -> list[dict]:
    return [{"model_conds": {"c_crossattn": torch.full((1, 2, 4), value)}}]


def test_calc_cond_batch_takes_comfyuis_keywords(session):
    import comfy.samplers

    x = torch.randn(1, 4, 3, 3)
    sigma = torch.tensor([0.5])
    calc = partial(comfy.samplers.calc_cond_batch, model=apply_model, conds=[entries(4.0)], timestep=sigma,
                   model_options={})
    (out,) = calc(x_in=x)
    torch.testing.assert_close(out, x * 2.0 + 2.0)


def test_sampling_and_cfg_function_take_comfyuis_keywords(session):
    import comfy.samplers

    class Model:
        apply_model = staticmethod(apply_model)

    x = torch.randn(1, 4, 3, 3)
    sigma = torch.tensor([1.0])
    out = comfy.samplers.sampling_function(model=Model(), x=x, timestep=sigma, uncond=entries(1.0),
                                           cond=entries(3.0), cond_scale=2.0, model_options={}, seed=0)
    torch.testing.assert_close(out, (x * 2.0 + 1.0) + ((x * 2.0 + 3.0) - (x * 2.0 + 1.0)) * 2.0)
    cond_pred, uncond_pred = torch.full_like(x, 3.0), torch.full_like(x, 1.0)
    guided = comfy.samplers.cfg_function(Model(), cond_pred=cond_pred, uncond_pred=uncond_pred, cond_scale=4.0,
                                         x=x, timestep=sigma)  # model_options may be left out, as there
    torch.testing.assert_close(guided, torch.full_like(x, 9.0))
