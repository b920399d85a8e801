"""Weighted AND prompts the way smZNodes runs them (tests/compat/api_packs/smz_and_pack): its
replaced `comfy.samplers.sampling_function` calls `comfy.samplers.calc_cond_batch` with a
`model_function_wrapper` that rewrites the locals of the frame running the batches (ComfyUI's
`_calc_cond_batch` names: `out_conds`, `out_counts`, `area`, `mult`, `batch_chunks`), and reads
what `calc_cond_batch` returns. comfy_core/sampling/cond_batch.py `run_batches` keeps those names
in one frame, so the pack's A1111 sum reaches the sampler as in ComfyUI."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from tests.compat.api_pack_support import import_api_pack

S = 0.5


class GaussianDenoiser(nn.Module):
    """The DiffusionModel contract around the ideal Gaussian denoiser (data mean = context mean)."""

    def __init__(self) -> None:
        super().__init__()
        from comfy_core.models.model_sampling import ModelSampling

        self.weight = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.model_sampling = ModelSampling("eps")
        self.latent_format = SimpleNamespace(channels=4, scale_factor=0.18215, shift_factor=0.0)

    def apply_model(self, x, sigma, c_crossattn, y=None, transformer_options=None):
        mu = c_crossattn.mean(dim=(1, 2)).view(-1, 1, 1, 1)
        sg = sigma.view(-1, 1, 1, 1)
        return (S * S * x + sg * sg * mu) / (S * S + sg * sg)

    def encode_adm(self, **_):
        return None


@pytest.fixture
def pack(session):
    yield from import_api_pack("smz_and_pack")


@pytest.fixture
def model():
    from comfy_core.patching import ModelPatcher

    return ModelPatcher(GaussianDenoiser())


POSITIVE = [[torch.full((1, 77, 8), 0.9), {"weight": 0.75}], [torch.full((1, 77, 8), -0.6), {"weight": 0.25}]]
NEGATIVE = [[torch.full((1, 77, 8), 0.1), {}]]


def _sample(model) -> torch.Tensor:
    from nodes.sampling import ksampler

    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    return ksampler(model, 7, 3, 5.0, "euler", "normal", POSITIVE, NEGATIVE, latent, 1.0)[0]["samples"]


def _reference(model, x, timestep, uncond, cond, cond_scale, model_options={}, seed=None):
    """The same A1111 sum, each entry through its own plain `calc_cond_batch` call."""
    import comfy.samplers

    out_uncond = comfy.samplers.calc_cond_batch(model, [uncond], x, timestep, model_options)[0]
    result = out_uncond.clone()
    scale = cond_scale / len(cond)
    for entry in reversed(cond):
        pred = comfy.samplers.calc_cond_batch(model, [[entry]], x, timestep, model_options)[0]
        result += (pred - out_uncond) * (entry["weight"] * scale)
    return result


def test_weighted_and_through_rewritten_calc_cond_batch_locals_reaches_the_sampler(pack, model):
    import comfy.samplers

    plain = _sample(model)  # ComfyUI's own average of the two entries
    original = comfy.samplers.sampling_function
    comfy.samplers.sampling_function = _reference
    try:
        expected = _sample(model)
    finally:
        comfy.samplers.sampling_function = original
    pack.register()
    try:
        got = _sample(model)
    finally:
        pack.unregister()
    assert pack.EVENTS, "the wrapper found no frame holding ComfyUI's `out_conds`"
    # one pass per step: uncond and both weighted entries batched together, last entry first
    assert pack.EVENTS[0] == ([1, 0, 0], [None, None, None])
    assert len(pack.EVENTS) == 3
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert not torch.allclose(got, plain, atol=1e-3)  # the weights really changed the result


def test_calc_cond_batch_returns_the_list_a_wrapper_swapped_in(pack, model):
    """ComfyUI's `_calc_cond_batch` returns its local `out_conds` after dividing each entry: a
    list put there by a wrapper (smZNodes) is what the caller gets, and `batch_chunks` set to 0
    leaves the accumulators untouched."""
    import comfy.samplers

    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    sigma = torch.tensor([2.0])
    positive = [{"model_conds": {"c_crossattn": c}, "weight": d["weight"]} for c, d in POSITIVE]
    negative = [{"model_conds": {"c_crossattn": c}} for c, _ in NEGATIVE]
    out = comfy.samplers.calc_cond_batch(model.model, [positive, negative], x, sigma,
                                         {"model_function_wrapper": pack._wrapper})
    assert isinstance(out, pack.OutputsList) and len(out) == 0
    [output] = out.outputs
    assert output.cond_or_uncond == [1, 0, 0] and len(output.mult) == 3
    assert all(torch.all(n == 1e-37) for n in out.out_counts)  # nothing accumulated in the frame
