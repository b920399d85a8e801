"""ComfyUI's CFG hooks in model_options (sampler_cfg_function, sampler_post_cfg_function,
sampler_pre_cfg_function): what each receives, in which space, in which order; plain CFG
unchanged without hooks; the ModelPatcher's hook lists (ComfyUI's keys, clones). ComfyUI's
`set_model_*` setters (and their old 3-argument CFG form) are compat's:
tests/compat/test_extension_points_models.py."""
from __future__ import annotations

import torch

from comfy_core.patching import ModelPatcher
from comfy_core.sampling.cfg import cfg_function, sampling_function
from comfy_core.sampling.conditioning import convert_cond, prepare_conds
from comfy_core.models.model_sampling import ModelSampling
from torch import nn

S = 0.5
X = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(0))
SIGMA = torch.tensor([2.0, 2.0])


class FakeModel(nn.Module):
    """A Gaussian denoiser whose data mean is its text context's mean."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.model_sampling = ModelSampling()

    def apply_model(self, x, sigma, c_crossattn, y=None, transformer_options=None):
        mu = c_crossattn.mean(dim=(1, 2)).view(-1, 1, 1, 1)
        sg = sigma.view(-1, 1, 1, 1)
        return (S * S * x + sg * sg * mu) / (S * S + sg * sg)

    def encode_adm(self, **_):
        return None


def ideal(mu: float) -> torch.Tensor:
    return (S * S * X + 4.0 * mu) / (S * S + 4.0)


def entries(model, value: float) -> list:
    conds = {"positive": convert_cond([[torch.full((1, 77, 8), value), {}]], "positive"), "negative": []}
    return prepare_conds(conds, X, model.model_sampling, None)["positive"]


def guided(model, cfg: float, options: dict) -> torch.Tensor:
    return sampling_function(model, X, SIGMA, entries(model, -1.0), entries(model, 1.0), cfg, options)


def test_without_hooks_the_result_is_plain_cfg_bit_for_bit() -> None:
    model = FakeModel()
    c, u = ideal(1.0), ideal(-1.0)
    assert torch.equal(guided(model, 7.0, {}), u + (c - u) * 7.0)
    assert torch.equal(cfg_function(model, c, u, 7.0, X, SIGMA, {}), u + (c - u) * 7.0)


def test_cfg_function_gets_comfyuis_args_in_noise_space() -> None:
    model, seen = FakeModel(), {}

    def fn(args):
        seen.update(args)
        return args["cond"] * 0.5  # a noise prediction

    out = guided(model, 7.0, {"sampler_cfg_function": fn})
    c, u = ideal(1.0), ideal(-1.0)
    assert set(seen) == {"cond", "uncond", "cond_scale", "timestep", "input", "sigma", "cond_denoised",
                         "uncond_denoised", "model", "model_options", "input_cond", "input_uncond"}
    torch.testing.assert_close(seen["cond"], X - c)
    torch.testing.assert_close(seen["uncond"], X - u)
    assert seen["input"] is X and seen["sigma"] is SIGMA and seen["timestep"] is SIGMA and seen["model"] is model
    assert seen["input_cond"][0]["cross_attn"].mean() == 1.0 and seen["input_uncond"][0]["cross_attn"].mean() == -1.0
    torch.testing.assert_close(out, X - (X - c) * 0.5)


def test_post_cfg_functions_chain_in_order_on_x0() -> None:
    model, order = FakeModel(), []

    def first(args):
        order.append(("first", args["denoised"].clone()))
        return args["denoised"] + 1

    def second(args):
        order.append(("second", args["denoised"].clone()))
        assert args["input"] is X and args["cond_scale"] == 3.0
        return args["denoised"] * 2

    out = guided(model, 3.0, {"sampler_post_cfg_function": [first, second]})
    cfg = ideal(-1.0) + (ideal(1.0) - ideal(-1.0)) * 3.0
    assert [name for name, _ in order] == ["first", "second"]
    torch.testing.assert_close(order[0][1], cfg)
    torch.testing.assert_close(out, (cfg + 1) * 2)


def test_pre_cfg_functions_see_and_replace_conds_out() -> None:
    model = FakeModel()

    def swap(args):
        assert len(args["conds"]) == 2 and args["input"] is X
        return [args["conds_out"][1], args["conds_out"][0]]

    out = guided(model, 2.0, {"sampler_pre_cfg_function": [swap]})
    torch.testing.assert_close(out, ideal(1.0) + (ideal(-1.0) - ideal(1.0)) * 2.0)


def test_patcher_setters_store_hooks_and_clones_keep_their_own_lists() -> None:
    patcher = ModelPatcher(FakeModel())
    post1, post2, pre = (lambda a: a["denoised"]), (lambda a: a["denoised"]), (lambda a: a["conds_out"])
    patcher.add_option_function("sampler_post_cfg_function", post1)
    clone = patcher.clone()
    clone.add_option_function("sampler_post_cfg_function", post2, disable_cfg1_optimization=True)
    clone.add_option_function("sampler_pre_cfg_function", pre)
    assert patcher.model_options["sampler_post_cfg_function"] == [post1]
    assert "disable_cfg1_optimization" not in patcher.model_options
    assert clone.model_options["sampler_post_cfg_function"] == [post1, post2]
    assert clone.model_options["sampler_pre_cfg_function"] == [pre]
    assert clone.model_options["disable_cfg1_optimization"] is True


def test_disable_cfg1_optimization_runs_the_negative_at_cfg_one() -> None:
    model, seen = FakeModel(), {}

    def post(args):
        seen["uncond"] = args["uncond_denoised"]
        return args["denoised"]

    guided(model, 1.0, {"sampler_post_cfg_function": [post]})
    assert torch.count_nonzero(seen["uncond"]) == 0  # skipped: zeros, as ComfyUI's batching gives
    guided(model, 1.0, {"sampler_post_cfg_function": [post], "disable_cfg1_optimization": True})
    torch.testing.assert_close(seen["uncond"], ideal(-1.0))
