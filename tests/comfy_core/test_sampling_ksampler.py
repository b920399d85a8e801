"""Sampling by steps and names (comfy_core.sampling.ksampler, the KSampler nodes' path): KSampler's
sigma rules, latent scaling, start noise, v-prediction, patch application and restoration (also on
error and interrupt), progress callbacks, previews."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from comfy_core.patching import ModelPatcher
from comfy_core.sampling.guider import SamplingError, prepare_mask
from comfy_core.sampling.ksampler import ksampler_sigmas, sample, sample_custom, slice_sigmas
from comfy_core.models.model_sampling import ModelSampling
from comfy_core.sampling.noise import prepare_noise
from comfy_core.sampling.preview import Latent2RGBPreviewer, PreviewError, latent_to_rgb
from comfy_core.sampling.samplers.registry import UnknownSamplerError
from comfy_core.sampling.schedulers import calculate_sigmas

S = 0.5
SD1_RGB = [[0.3512, 0.2297, 0.3227], [0.3250, 0.4974, 0.2350], [-0.2829, 0.1762, 0.2721], [-0.2120, -0.2616, -0.7177]]


class FakeDiffusionModel(nn.Module):
    """Follows the DiffusionModel contract; its 'network' is the ideal Gaussian denoiser (eps or v)
    whose data mean is the context mean plus `self.offset` (a weight that patches may change)."""

    def __init__(self, prediction: str = "eps") -> None:
        super().__init__()
        self.offset = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.model_sampling = ModelSampling(prediction)  # type: ignore[arg-type]
        self.latent_format = SimpleNamespace(channels=4, scale_factor=0.18215, shift_factor=0.0, latent_rgb_factors=SD1_RGB)
        self.seen: list[dict] = []
        self.fail_at_call: int | None = None

    def apply_model(self, x, sigma, c_crossattn, y=None, transformer_options=None):
        self.seen.append({"batch": x.shape[0], "offset": float(self.offset), "sigma": sigma.clone(), "x": x.clone()})
        if self.fail_at_call is not None and len(self.seen) >= self.fail_at_call:
            raise RuntimeError("boom inside the model")
        ms = self.model_sampling
        mu = (c_crossattn.mean(dim=(1, 2)) + self.offset).view(-1, 1, 1, 1)
        sg = sigma.view(-1, 1, 1, 1)
        x0 = (S * S * x + sg * sg * mu) / (S * S + sg * sg)
        # Express the ideal x0 as the network's raw output, then decode it as the real model would.
        if ms.prediction == "eps":
            raw = (x - x0) / sg
        else:  # v = a*eps - b*x0 in VP terms, with eps = (x - x0)/sigma
            a, b = 1 / (1 + sg * sg).sqrt(), sg / (1 + sg * sg).sqrt()
            raw = a * (x - x0) / sg - b * x0
        return ms.calculate_denoised(sigma, raw, x)

    def encode_adm(self, **_):
        return None


def cond(v: float) -> list:
    return [[torch.full((1, 77, 8), v), {}]]


def patcher(prediction: str = "eps") -> ModelPatcher:
    return ModelPatcher(FakeDiffusionModel(prediction))


EMPTY = torch.zeros(1, 4, 8, 8)


# -- sigma rules -------------------------------------------------------------------------------

def test_denoise_schedules_more_steps_and_keeps_the_tail() -> None:
    ms = ModelSampling()
    s = ksampler_sigmas(ms, 10, "euler", "karras", denoise=0.5)
    assert len(s) == 11
    torch.testing.assert_close(s, calculate_sigmas(ms, "karras", 20)[-11:])
    assert float(s[0]) == pytest.approx(1.0908, abs=1e-4) and float(s[-2]) == pytest.approx(0.02917, abs=1e-5)
    assert len(ksampler_sigmas(ms, 10, "euler", "karras", denoise=0.0)) == 0
    torch.testing.assert_close(ksampler_sigmas(ms, 10, "euler", "karras", 0.99995), calculate_sigmas(ms, "karras", 10))


def test_dpm_2_and_uni_pc_drop_the_penultimate_sigma() -> None:
    ms = ModelSampling()
    s = ksampler_sigmas(ms, 10, "dpm_2", "normal")
    expected = [14.6146, 8.3072, 5.0924, 3.3251, 2.2797, 1.6156, 1.1629, 0.8319, 0.5712, 0.3437, 0.0]
    assert s.tolist() == pytest.approx(expected, abs=1e-4)
    torch.testing.assert_close(s, calculate_sigmas(ms, "sgm_uniform", 10), rtol=1e-5, atol=1e-6)
    assert len(ksampler_sigmas(ms, 10, "uni_pc_bh2", "karras")) == 11


def test_start_and_last_step_windows() -> None:
    s = torch.arange(10, -1, -1).float()  # 10 steps
    assert slice_sigmas(s, last_step=4).tolist() == [10, 9, 8, 7, 6]
    assert slice_sigmas(s, last_step=4, force_full_denoise=True).tolist() == [10, 9, 8, 7, 0]
    assert slice_sigmas(s, start_step=7).tolist() == [3, 2, 1, 0]
    assert slice_sigmas(s, start_step=10) is None
    assert slice_sigmas(s, start_step=2, last_step=5).tolist() == [8, 7, 6, 5]
    assert s.tolist() == list(range(10, -1, -1))  # input untouched


def test_steps_must_be_positive() -> None:
    with pytest.raises(SamplingError, match="steps"):
        ksampler_sigmas(ModelSampling(), 0, "euler", "karras")


# -- sample / sample_custom----------------------------------------------------------------------

def test_txt2img_with_euler_matches_the_exact_solution() -> None:
    noise = prepare_noise(EMPTY, 0)
    out = sample(patcher(), noise, 40, 1.0, "heun", "karras", cond(0.3), cond(0.0), EMPTY)
    sigma_max = float(ModelSampling().sigma_max)
    x_t = noise * (1 + sigma_max ** 2) ** 0.5  # ComfyUI's max-denoise start
    x0 = 0.3 + (x_t - 0.3) * S / (S * S + sigma_max ** 2) ** 0.5
    torch.testing.assert_close(out, x0 / 0.18215, rtol=0, atol=0.05 / 0.18215)


def test_v_prediction_model_gives_the_same_answer_as_eps() -> None:
    noise = prepare_noise(EMPTY, 1)
    eps = sample(patcher("eps"), noise, 12, 5.0, "dpmpp_2m", "karras", cond(0.3), cond(-0.2), EMPTY)
    v = sample(patcher("v"), noise, 12, 5.0, "dpmpp_2m", "karras", cond(0.3), cond(-0.2), EMPTY)
    torch.testing.assert_close(eps, v, rtol=1e-4, atol=1e-4)


def test_same_seed_same_result_for_stochastic_samplers() -> None:
    noise = prepare_noise(EMPTY, 3)
    a = sample(patcher(), noise, 6, 4.0, "dpmpp_2m_sde", "karras", cond(0.3), cond(0.0), EMPTY, seed=3)
    b = sample(patcher(), noise, 6, 4.0, "dpmpp_2m_sde", "karras", cond(0.3), cond(0.0), EMPTY, seed=3)
    c = sample(patcher(), noise, 6, 4.0, "dpmpp_2m_sde", "karras", cond(0.3), cond(0.0), EMPTY, seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_euler_ancestral_step_noise_is_the_seeds_own_generator_stream() -> None:
    # ComfyUI 0.3.64: prepare_noise draws randn(shape) from manual_seed(seed); the ancestral
    # sampler's default noise sampler is a second Generator seeded with the same seed (no +1), one
    # randn(x.shape) per step. Reference: k-diffusion's Euler ancestral step written out here with
    # the fake model's closed-form denoiser.
    seed, steps = 7, 5
    noise = prepare_noise(EMPTY, seed)
    out = sample(patcher(), noise, steps, 1.0, "euler_ancestral", "karras", cond(0.3), cond(0.0), EMPTY, seed=seed)
    sigmas = calculate_sigmas(ModelSampling(), "karras", steps)
    step_noise = torch.Generator().manual_seed(seed)
    x = noise * (1 + float(sigmas[0]) ** 2) ** 0.5
    for i in range(steps):
        s, s_next = sigmas[i], sigmas[i + 1]
        denoised = (S * S * x + s * s * 0.3) / (S * S + s * s)
        sigma_up = torch.minimum(s_next, (s_next ** 2 * (s ** 2 - s_next ** 2) / s ** 2) ** 0.5)
        sigma_down = (s_next ** 2 - sigma_up ** 2) ** 0.5
        x = x + (x - denoised) / s * (sigma_down - s)
        if s_next > 0:
            x = x + torch.randn(x.shape, generator=step_noise) * sigma_up
    torch.testing.assert_close(out, x / 0.18215, rtol=1e-4, atol=1e-4)


def test_nonzero_latent_is_scaled_in_and_out_and_denoise_zero_returns_it() -> None:
    latent = torch.full((1, 4, 8, 8), 2.0)
    m = patcher()
    starts = []
    out = sample_custom(m, torch.zeros_like(latent), 1.0, "euler", torch.tensor([1e-9, 0.0]), cond(0.0), cond(0.0),
                        latent, callback=lambda i, x0, x, n: starts.append(x.clone()))
    torch.testing.assert_close(starts[0], latent * 0.18215)  # processed into model space, no noise
    torch.testing.assert_close(out, latent, rtol=1e-5, atol=1e-5)  # and back out
    assert sample(m, torch.zeros_like(latent), 5, 1.0, "euler", "karras", cond(0.0), cond(0.0), latent, denoise=0.0) is latent


def test_img2img_start_uses_sigma_not_max_denoise_scaling() -> None:
    latent = torch.zeros(1, 4, 8, 8)
    noise = torch.ones_like(latent)
    starts = []
    sample(patcher(), noise, 4, 1.0, "euler", "karras", cond(0.0), cond(0.0), latent, denoise=0.5,
           callback=lambda i, x0, x, n: starts.append(x.clone()))
    s0 = float(ksampler_sigmas(ModelSampling(), 4, "euler", "karras", 0.5)[0])
    torch.testing.assert_close(starts[0], torch.full_like(latent, s0))  # noise * sigma0
    starts.clear()
    sample(patcher(), noise, 4, 1.0, "euler", "karras", cond(0.0), cond(0.0), latent,
           callback=lambda i, x0, x, n: starts.append(x.clone()))
    smax = float(ModelSampling().sigma_max)
    torch.testing.assert_close(starts[0], torch.full_like(latent, (1 + smax ** 2) ** 0.5))


def test_start_at_step_past_the_end_returns_the_input() -> None:
    latent = torch.randn(1, 4, 8, 8)
    out = sample(patcher(), torch.zeros_like(latent), 5, 1.0, "euler", "karras", cond(0.0), cond(0.0), latent, start_step=5)
    assert out is latent


def test_advanced_split_sampling_equals_one_run() -> None:
    noise = prepare_noise(EMPTY, 11)
    m = patcher()
    full = sample(m, noise, 10, 3.0, "euler", "normal", cond(0.3), cond(0.0), EMPTY)
    first = sample(m, noise, 10, 3.0, "euler", "normal", cond(0.3), cond(0.0), EMPTY, last_step=4)
    rest = sample(m, torch.zeros_like(noise), 10, 3.0, "euler", "normal", cond(0.3), cond(0.0), first, start_step=4)
    torch.testing.assert_close(rest, full, rtol=1e-4, atol=1e-4)


def test_progress_callback_once_per_step_with_x0() -> None:
    calls = []
    sample(patcher(), prepare_noise(EMPTY, 0), 7, 2.0, "dpmpp_2m", "karras", cond(0.3), cond(0.0), EMPTY,
           callback=lambda i, x0, x, n: calls.append((i, n, tuple(x0.shape))))
    assert calls == [(i, 7, (1, 4, 8, 8)) for i in range(7)]


def test_patches_are_applied_during_sampling_and_restored_after() -> None:
    m = patcher()
    base = m.model
    p = m.clone()
    p.add_patches({"offset": torch.tensor(0.25)})
    p.add_object_patch("model_sampling", ModelSampling("eps"))
    out_patched = sample(p, prepare_noise(EMPTY, 0), 4, 1.0, "euler", "karras", cond(0.0), cond(0.0), EMPTY)
    assert all(c["offset"] == 0.25 for c in base.seen)
    assert float(base.offset) == 0.0
    base.seen.clear()
    out_plain = sample(m, prepare_noise(EMPTY, 0), 4, 1.0, "euler", "karras", cond(0.0), cond(0.0), EMPTY)
    assert all(c["offset"] == 0.0 for c in base.seen)
    assert not torch.allclose(out_patched, out_plain)


def test_patches_restored_after_an_exception_inside_sampling() -> None:
    m = patcher()
    base = m.model
    ms_before = base.model_sampling
    p = m.clone()
    p.add_patches({"offset": torch.tensor(1.5)})
    p.add_object_patch("model_sampling", ModelSampling("v"))
    base.fail_at_call = 3
    with pytest.raises(RuntimeError, match="boom"):
        sample(p, prepare_noise(EMPTY, 0), 6, 1.0, "euler", "karras", cond(0.0), cond(0.0), EMPTY)
    assert base.seen[-1]["offset"] == 1.5  # it was patched when it failed
    assert float(base.offset) == 0.0 and base.model_sampling is ms_before


def test_interrupt_from_the_callback_stops_within_one_step_and_restores() -> None:
    class Interrupted(Exception):
        pass

    m = patcher()
    base = m.model
    p = m.clone()
    p.add_patches({"offset": torch.tensor(0.5)})

    def stop(i, x0, x, n):
        if i == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        sample(p, prepare_noise(EMPTY, 0), 20, 1.0, "heun", "karras", cond(0.0), cond(0.0), EMPTY, callback=stop)
    assert len(base.seen) == 5  # heun: 2 calls per finished step, the callback follows the first
    assert float(base.offset) == 0.0


def test_noise_mask_inpaints_only_the_masked_region() -> None:
    latent = torch.full((1, 4, 8, 8), 1.0)
    mask = torch.zeros(1, 16, 16)
    mask[:, :, :8] = 1.0  # left half (given at 2x latent size)
    out = sample(patcher(), prepare_noise(latent, 0), 8, 1.0, "euler", "karras", cond(0.3), cond(0.0), latent,
                 noise_mask=mask)
    torch.testing.assert_close(out[..., 6:], latent[..., 6:], rtol=1e-4, atol=1e-4)
    assert not torch.allclose(out[..., :2], latent[..., :2], atol=0.1)
    m = prepare_mask(mask, torch.Size((2, 4, 8, 8)), torch.device("cpu"))
    assert m.shape == (2, 4, 8, 8) and float(m[0, 0, 0, 0]) == 1.0 and float(m[0, 0, 0, 7]) == 0.0


def test_ddim_with_noise_mask_runs_and_is_euler_without() -> None:
    latent = torch.full((1, 4, 8, 8), 1.0)
    noise = prepare_noise(latent, 0)
    a = sample(patcher(), noise, 5, 1.0, "ddim", "karras", cond(0.3), cond(0.0), EMPTY)
    b = sample(patcher(), noise, 5, 1.0, "euler", "karras", cond(0.3), cond(0.0), EMPTY)
    assert torch.equal(a, b)
    mask = torch.ones(1, 8, 8)
    mask[:, :, 4:] = 0
    runs = {}
    for name in ("ddim", "euler"):
        m = patcher()
        sample(m, noise, 5, 1.0, name, "karras", cond(0.3), cond(0.0), latent, noise_mask=mask, seed=0)
        runs[name] = m.model.seen[1]["x"]  # the model input at step 1
    # ddim re-noises the kept region with noise from seed + 1; euler with the sampling noise
    assert not torch.equal(runs["ddim"][..., 4:], runs["euler"][..., 4:])
    torch.testing.assert_close(runs["ddim"][..., :4], runs["euler"][..., :4])


def test_bad_inputs_raise_typed_errors() -> None:
    with pytest.raises(UnknownSamplerError):
        sample(patcher(), EMPTY, 4, 1.0, "nope", "karras", cond(0.0), cond(0.0), EMPTY)
    with pytest.raises(SamplingError, match="channels"):
        bad = torch.zeros(1, 16, 8, 8)
        sample(patcher(), bad, 4, 1.0, "euler", "karras", cond(0.0), cond(0.0), bad)
    with pytest.raises(SamplingError, match="noise shape"):
        sample(patcher(), torch.zeros(1, 4, 4, 4), 4, 1.0, "euler", "karras", cond(0.0), cond(0.0), EMPTY)


# -- previews ----------------------------------------------------------------------------------

def test_latent_to_rgb_projection() -> None:
    x0 = torch.zeros(2, 4, 3, 5)
    x0[0, 0] = 1.0  # channel 0 only: rgb = factors[0]
    img = latent_to_rgb(x0, SD1_RGB)
    assert img.size == (5, 3) and img.mode == "RGB"
    expected = tuple(int(((v + 1) / 2) * 255) for v in SD1_RGB[0])
    assert img.getpixel((0, 0)) == expected
    with pytest.raises(PreviewError, match="channels"):
        latent_to_rgb(torch.zeros(1, 3, 2, 2), SD1_RGB)


def test_previewer_gives_a_jpeg_tuple_or_none() -> None:
    fmt, img, size = Latent2RGBPreviewer(SimpleNamespace(latent_rgb_factors=SD1_RGB)).preview(torch.zeros(1, 4, 4, 4))
    assert fmt == "JPEG" and size == 512 and img.size == (4, 4)
    assert Latent2RGBPreviewer(SimpleNamespace()).preview(torch.zeros(1, 4, 4, 4)) is None


def test_sample_custom_accepts_a_pack_sampler_function_and_options() -> None:
    calls = []

    def my_sampler(model, x, sigmas, extra_args=None, callback=None, disable=None, scale=1.0):
        calls.append((tuple(sigmas.tolist()), sorted(extra_args), scale))
        for i in range(len(sigmas) - 1):
            den = model(x, sigmas[i] * x.new_ones([x.shape[0]]), **extra_args)
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i], "denoised": den})
            x = den + (x - den) * (sigmas[i + 1] / sigmas[i]) * scale
        return x

    seen = []
    sigmas = torch.tensor([14.6146, 3.0, 0.5, 0.0])
    out = sample_custom(patcher(), prepare_noise(EMPTY, 0), 2.0, my_sampler, sigmas, cond(0.3), cond(0.0), EMPTY,
                        callback=lambda i, x0, x, n: seen.append((i, n)), seed=1, sampler_options={"scale": 1.0})
    assert calls == [(tuple(sigmas.tolist()), ["denoise_mask", "model_options", "seed"], 1.0)]
    assert seen == [(0, 3), (1, 3), (2, 3)] and out.shape == EMPTY.shape


def test_a_patched_model_sampling_drives_the_schedule() -> None:
    m = patcher()
    p = m.clone()
    p.add_object_patch("model_sampling", ModelSampling(linear_end=0.02))
    starts = []
    sample(p, torch.ones_like(EMPTY), 3, 1.0, "euler", "karras", cond(0.0), cond(0.0), EMPTY,
           callback=lambda i, x0, x, n: starts.append(float(x.flatten()[0])))
    smax = float(ModelSampling(linear_end=0.02).sigma_max)
    assert smax > 20 and starts[0] == pytest.approx((1 + smax * smax) ** 0.5, rel=1e-5)


def test_samplers_written_for_comfyui_find_its_object_chain() -> None:
    found = {}

    def comfy_style_sampler(model, x, sigmas, extra_args=None, callback=None, disable=None):
        found["ms"] = model.inner_model.inner_model.model_sampling
        found["patcher_ms"] = model.inner_model.model_patcher.get_model_object("model_sampling")
        return x

    p = patcher()
    sample_custom(p, torch.zeros_like(EMPTY), 1.0, comfy_style_sampler, torch.tensor([1.0, 0.0]), cond(0.0),
                  cond(0.0), EMPTY)
    assert found["ms"] is p.model.model_sampling and found["patcher_ms"] is p.model.model_sampling
