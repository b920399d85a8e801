"""Custom sampling nodes (SamplerCustom, SamplerCustomAdvanced, NOISE and GUIDER nodes): KSampler is
the composition CFGGuider + KSamplerSelect + BasicScheduler + RandomNoise, bit for bit on a tiny
SD1 checkpoint; guiders against their defining formulas; ComfyUI's sockets exactly."""
from __future__ import annotations

import pytest
import torch

from nodes.custom_sampling import (add_noise, basic_guider, cfg_guider_node, disable_noise, dual_cfg_guider,
                                   perp_neg_guider, random_noise, sampler_custom, sampler_custom_advanced)
from nodes.errors import NodeInputError
from nodes.sampler_nodes import ksampler_select
from nodes.sampling import ksampler, ksampler_advanced
from nodes.scheduler_nodes import basic_scheduler, split_sigmas


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    model, clip, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    positive = clip_text_encode("a red cube", clip)[0]
    negative = clip_text_encode("blurry", clip)[0]
    empty = clip_text_encode("", clip)[0]
    return model, positive, negative, empty


def _latent(nonzero: bool = False, **extra) -> dict:
    samples = torch.zeros(2, 4, 8, 8)
    if nonzero:
        samples = torch.linspace(-1, 1, samples.numel()).reshape(samples.shape)
    return {"samples": samples, **extra}


@pytest.mark.parametrize("sampler_name", ["euler", "euler_ancestral", "dpmpp_2m_sde", "dpmpp_2m", "ddim"])
def test_sampler_custom_advanced_is_ksampler_bit_for_bit(sd1, sampler_name) -> None:
    model, positive, negative, _ = sd1
    latent = _latent()
    expected = ksampler(model, 42, 3, 6.5, sampler_name, "karras", positive, negative, latent, 1.0)[0]["samples"]
    sigmas = basic_scheduler(model, "karras", 3, 1.0)[0]
    guider = cfg_guider_node(model, positive, negative, 6.5)[0]
    out, denoised = sampler_custom_advanced(random_noise(42)[0], guider, ksampler_select(sampler_name)[0], sigmas,
                                            latent)
    assert torch.equal(out["samples"], expected)
    assert denoised["samples"].shape == expected.shape


@pytest.mark.parametrize("sampler_name", ["euler_ancestral", "dpmpp_sde"])
def test_sampler_custom_is_ksampler_bit_for_bit_also_img2img_with_a_mask(sd1, sampler_name) -> None:
    model, positive, negative, _ = sd1
    mask = torch.zeros(1, 8, 8)
    mask[:, 2:6, 2:6] = 1.0
    latent = _latent(nonzero=True, noise_mask=mask, batch_index=[3, 1])
    expected = ksampler(model, 7, 4, 5.0, sampler_name, "normal", positive, negative, latent, 0.6)[0]
    sigmas = basic_scheduler(model, "normal", 4, 0.6)[0]
    out, _ = sampler_custom(model, True, 7, 5.0, positive, negative, ksampler_select(sampler_name)[0], sigmas, latent)
    assert torch.equal(out["samples"], expected["samples"])
    # The LATENT's other keys are carried as ComfyUI's latent.copy(); the input is not modified.
    assert out["noise_mask"] is mask and out["batch_index"] == [3, 1] and latent["samples"].abs().sum() > 0


def test_ksampler_advanced_split_is_two_custom_advanced_runs(sd1) -> None:
    """KSamplerAdvanced steps 0-2 with leftover noise then 2-4 without noise equals
    SplitSigmas(2) with RandomNoise then DisableNoise."""
    model, positive, negative, _ = sd1
    latent = _latent()
    first = ksampler_advanced(model, "enable", 5, 4, 4.0, "euler", "simple", positive, negative, latent, 0, 2,
                              "enable")[0]
    full = ksampler_advanced(model, "disable", 5, 4, 4.0, "euler", "simple", positive, negative, first, 2, 10000,
                             "disable")[0]["samples"]
    high, low = split_sigmas(basic_scheduler(model, "simple", 4, 1.0)[0], 2)
    guider = cfg_guider_node(model, positive, negative, 4.0)[0]
    sampler = ksampler_select("euler")[0]
    mid, _ = sampler_custom_advanced(random_noise(5)[0], guider, sampler, high, latent)
    assert torch.equal(mid["samples"], first["samples"])
    end, _ = sampler_custom_advanced(disable_noise()[0], guider, sampler, low, mid)
    assert torch.equal(end["samples"], full)


def test_denoised_output_is_the_last_x0_in_vae_space(sd1) -> None:
    """With euler ending at sigma 0, the last step lands exactly on its x0 prediction."""
    model, positive, negative, _ = sd1
    sigmas = basic_scheduler(model, "karras", 2, 1.0)[0]
    out, denoised = sampler_custom(model, True, 1, 3.0, positive, negative, ksampler_select("euler")[0], sigmas,
                                   _latent())
    assert torch.allclose(out["samples"], denoised["samples"], atol=1e-5)
    # No steps: both outputs are the input latent.
    latent = _latent(nonzero=True)
    out, denoised = sampler_custom(model, True, 1, 3.0, positive, negative, ksampler_select("euler")[0],
                                   torch.FloatTensor([]), latent)
    assert out["samples"] is latent["samples"] and denoised is out


def test_basic_guider_is_cfg_at_one(sd1) -> None:
    model, positive, negative, _ = sd1
    sigmas = basic_scheduler(model, "karras", 2, 1.0)[0]
    sampler = ksampler_select("euler")[0]
    a, _ = sampler_custom_advanced(random_noise(3)[0], basic_guider(model, positive)[0], sampler, sigmas, _latent())
    b, _ = sampler_custom_advanced(random_noise(3)[0], cfg_guider_node(model, positive, negative, 1.0)[0], sampler,
                                   sigmas, _latent())
    assert torch.equal(a["samples"], b["samples"])


def _guided_x0(guider, model, x, sigma):
    """One guided prediction D(x, sigma) with the guider set up as for a run."""
    from comfy_core.sampling.guider import SamplerObject

    seen = {}

    def one_call(denoiser, x0, sigmas, extra_args=None, callback=None, disable=None):
        seen["x0"] = denoiser(x, sigma * x.new_ones([x.shape[0]]), **extra_args)
        return x0

    guider.sample(torch.zeros_like(x), torch.zeros_like(x), SamplerObject(one_call), torch.tensor([sigma, 0.0]))
    return seen["x0"]


# Guider formulas on an ideal Gaussian denoiser whose data mean is the context's mean (batch items
# independent, so batching cannot blur the comparison): D_c(x, s) = (S^2 x + s^2 c) / (S^2 + s^2).
def _toy_model():
    from comfy_core.patching import ModelPatcher
    from tests.nodes.test_sampling_nodes import FakeDiffusionModel

    return ModelPatcher(FakeDiffusionModel())


def _d(x, s, c, S=0.5):
    return (S * S * x + s * s * c) / (S * S + s * s)


def _c(v):
    from tests.nodes.test_sampling_nodes import cond

    return cond(v)


X = torch.linspace(-2, 2, 2 * 4 * 8 * 8).reshape(2, 4, 8, 8)


@pytest.mark.parametrize("style", ["regular", "nested"])
def test_dual_cfg_guider_formulas(style) -> None:
    """regular: D_neg + cfg2 (D_mid - D_neg) + cfg1 (D_c1 - D_mid);
    nested: D_neg + cfg2 (D_mid + cfg1 (D_c1 - D_mid) - D_neg)."""
    m = _toy_model()
    c1, mid, neg, cfg1, cfg2 = 0.9, 0.4, -0.3, 2.5, 4.0
    d1, dm, dn = _d(X, 2.0, c1), _d(X, 2.0, mid), _d(X, 2.0, neg)
    if style == "regular":
        expected = dn + cfg2 * (dm - dn) + cfg1 * (d1 - dm)
    else:
        expected = dn + cfg2 * (dm + cfg1 * (d1 - dm) - dn)
    got = _guided_x0(dual_cfg_guider(m, _c(c1), _c(mid), _c(neg), cfg1, cfg2, style)[0], m, X, 2.0)
    assert torch.allclose(got, expected, atol=1e-5)


def test_dual_cfg_skips_passes_at_scale_one() -> None:
    """cfg2 == 1 drops the negative pass; cfg1 == cfg2 == 1 also the middle one (ComfyUI's optimisation)."""
    m = _toy_model()
    guider = dual_cfg_guider(m, _c(0.9), _c(0.4), _c(-0.3), 1.0, 1.0, "regular")[0]
    calls_before = len(m.model.offsets_seen)
    got = _guided_x0(guider, m, X, 2.0)
    assert len(m.model.offsets_seen) - calls_before == 1
    assert torch.allclose(got, _d(X, 2.0, 0.9), atol=1e-6)


def test_perp_neg_guider_formula() -> None:
    m = _toy_model()
    x = X
    d_pos, d_neg, d_empty = _d(x, 2.0, 0.8), _d(x, 2.0, -0.5), _d(x, 2.0, 0.1)
    pos, neg = d_pos - d_empty, d_neg - d_empty
    perp = neg - (neg * pos).sum() / (pos * pos).sum() * pos  # neg's component orthogonal to pos
    expected = d_empty + 6.0 * (pos - 0.7 * perp)
    got = _guided_x0(perp_neg_guider(m, _c(0.8), _c(-0.5), _c(0.1), 6.0, 0.7)[0], m, x, 2.0)
    assert torch.allclose(got, expected, atol=1e-5)
    # neg_scale 0: plain CFG of positive against the empty prompt.
    got0 = _guided_x0(perp_neg_guider(m, _c(0.8), _c(-0.5), _c(0.1), 6.0, 0.0)[0], m, x, 2.0)
    assert torch.allclose(got0, d_empty + 6.0 * pos, atol=1e-5)


def test_perp_neg_pure_function_on_orthogonal_vectors() -> None:
    from comfy_core.sampling.perp_neg import perp_neg

    empty = torch.zeros(1, 2)
    pos = torch.tensor([[1.0, 0.0]])
    neg = torch.tensor([[1.0, 2.0]])  # along pos: 1, perpendicular: (0, 2)
    assert torch.equal(perp_neg(pos, neg, empty, 0.5, 2.0), torch.tensor([[2.0, -2.0]]))


def test_noise_nodes() -> None:
    latent = {"samples": torch.zeros(3, 4, 5, 6), "batch_index": [2, 0, 2]}
    gen = torch.Generator().manual_seed(11)
    stream = [torch.randn(1, 4, 5, 6, generator=gen) for _ in range(3)]
    noise = random_noise(11)[0]
    assert noise.seed == 11
    assert torch.equal(noise.generate_noise(latent), torch.cat([stream[2], stream[0], stream[2]]))
    empty = disable_noise()[0]
    assert empty.seed == 0 and torch.equal(empty.generate_noise(latent), torch.zeros(3, 4, 5, 6))


def test_add_noise_node(sd1) -> None:
    model, *_ = sd1
    latent = {"samples": torch.zeros(1, 4, 8, 8), "noise_mask": torch.ones(1, 8, 8)}
    sigmas = torch.tensor([5.0, 2.0, 0.5])
    out = add_noise(model, random_noise(4)[0], sigmas, latent)[0]
    noise = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(4))
    # eps model: latent_in + noise * |5 - 0.5|, back out of model space (/ 0.18215); empty latent unshifted.
    assert torch.allclose(out["samples"], noise * 4.5 / 0.18215, rtol=1e-6)
    assert out["noise_mask"] is latent["noise_mask"]
    one = add_noise(model, random_noise(4)[0], torch.tensor([3.0]), latent)[0]
    assert torch.allclose(one["samples"], noise * 3.0 / 0.18215, rtol=1e-6)
    nonzero = {"samples": torch.full((1, 4, 8, 8), 0.5)}
    shifted = add_noise(model, disable_noise()[0], sigmas, nonzero)[0]
    assert torch.allclose(shifted["samples"], nonzero["samples"])
    assert add_noise(model, random_noise(4)[0], torch.FloatTensor([]), latent)[0] is latent


def test_typed_errors(sd1) -> None:
    model, positive, negative, _ = sd1
    sigmas = torch.tensor([1.0, 0.0])
    with pytest.raises(NodeInputError, match="guider"):
        sampler_custom_advanced(random_noise(0)[0], "not a guider", ksampler_select("euler")[0], sigmas, _latent())
    with pytest.raises(NodeInputError, match="sigmas"):
        sampler_custom(model, True, 0, 1.0, positive, negative, ksampler_select("euler")[0], [1.0, 0.0], _latent())
    with pytest.raises(NodeInputError, match="latent_image"):
        sampler_custom(model, True, 0, 1.0, positive, negative, ksampler_select("euler")[0], sigmas, {"x": 1})
    with pytest.raises(NodeInputError, match="style"):
        dual_cfg_guider(model, positive, positive, negative, 1.0, 1.0, "sideways")
    with pytest.raises(NodeInputError, match="positive"):
        cfg_guider_node(model, "text", negative, 1.0)


