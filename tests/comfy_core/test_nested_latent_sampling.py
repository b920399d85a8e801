"""Sampling a nested [video, audio] latent (comfy_core/latent/nested.py) through comfy_core.sampling
on the tiny LTX-2 joint model: KSampler's path (`ksampler.sample` -> `CFGGuider.sample`) against
the same Euler steps run by hand on the packed latent through the model, seeded noise per part,
the packed denoise mask, nested callbacks, and plain latents left as they were."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.ltx2.conditions import LTXAVConditions
from comfy_core.latent.nested import NestedTensor, pack_latents, unpack_latents
from comfy_core.models.diffusion import DiffusionModel
from comfy_core.families.ltxv.latent_format import LTXV
from comfy_core.models.model_sampling import FlowModelSampling
from comfy_core.patching.model import ModelPatcher
from comfy_core.sampling.guider import CFGGuider, SamplingError, sampler_object
from comfy_core.sampling.ksampler import ksampler_sigmas, sample
from comfy_core.sampling.noise import prepare_noise
from comfy_core.sampling.noise_object import EmptyNoise, RandomNoise
from tests.comfy_core.test_ltx2_dit import F_, H_, RATE, T_AUDIO, W_, _inputs, _load

SEED = 7


@pytest.fixture(scope="module")
def ltx2(tmp_path_factory):
    network, _, _ = _load(tmp_path_factory.mktemp("ltx2"), "2.0")
    # LTX's latent format (3 latent axes, scale 1) at the tiny model's 16 video channels
    fmt = LTXV(name="ltxav-test", channels=16, latent_rgb_factors=(), latent_rgb_factors_bias=None)
    model = DiffusionModel(network, FlowModelSampling(shift=1.0, multiplier=1.0), fmt, adm=LTXAVConditions())
    return model


def _conditioning():
    _, _, v_ctx, a_ctx = _inputs(11)
    context = torch.cat([v_ctx, a_ctx], -1)  # already through the connectors' width: used as it is
    return [[context, {"frame_rate": RATE}]], context


def _empty():
    return NestedTensor([torch.zeros(1, 16, F_, H_, W_), torch.zeros(1, 8, T_AUDIO, 16)])


def test_noise_is_drawn_per_part_from_one_generator():
    latent = _empty()
    noise = prepare_noise(latent, SEED)
    assert noise.is_nested and [tuple(t.shape) for t in noise.unbind()] == [(1, 16, F_, H_, W_), (1, 8, T_AUDIO, 16)]
    g = torch.manual_seed(SEED)  # ComfyUI: the video's randn, then the audio's, from one seeded generator
    video = torch.randn((1, 16, F_, H_, W_), generator=g)
    audio = torch.randn((1, 8, T_AUDIO, 16), generator=g)
    assert torch.equal(noise.unbind()[0], video) and torch.equal(noise.unbind()[1], audio)
    assert torch.equal(RandomNoise(SEED).generate_noise({"samples": latent}).unbind()[1], audio)
    zeros = EmptyNoise().generate_noise({"samples": latent})
    assert zeros.is_nested and all(torch.count_nonzero(t) == 0 for t in zeros.unbind())


def test_two_ksampler_steps_equal_the_hand_loop(ltx2):
    positive, context = _conditioning()
    latent = _empty()
    noise = prepare_noise(latent, SEED)
    steps = []
    with torch.no_grad():
        out = sample(ModelPatcher(ltx2), noise, 2, 1.0, "euler", "simple", positive, positive, latent, seed=SEED,
                     callback=lambda i, x0, x, n: steps.append((i, x0, x, n)))
        sigmas = ksampler_sigmas(ltx2.model_sampling, 2, "euler", "simple")
        x, shapes = pack_latents(noise.unbind())
        x = x * sigmas[0]  # flow noise scaling of an empty latent
        extra = ltx2.extra_inputs(latent_shapes=shapes, frame_rate=RATE)
        for s, s_next in zip(sigmas[:-1], sigmas[1:]):
            denoised = ltx2.apply_model(x, s.reshape(1), c_crossattn=context, **extra)
            x = x + (x - denoised) / s * (s_next - s)
    assert out.is_nested
    video, audio = out.unbind()
    want_video, want_audio = unpack_latents(x, shapes)
    assert video.shape == (1, 16, F_, H_, W_) and audio.shape == (1, 8, T_AUDIO, 16)
    assert torch.allclose(video, want_video, atol=1e-5), (video - want_video).abs().max()
    assert torch.allclose(audio, want_audio, atol=1e-5), (audio - want_audio).abs().max()
    assert not torch.allclose(video, noise.unbind()[0])
    # callbacks see the nested view of the packed run
    assert [s[0] for s in steps] == [0, 1] and all(s[1].is_nested and s[2].is_nested for s in steps)
    assert [tuple(t.shape) for t in steps[0][1].unbind()] == [(1, 16, F_, H_, W_), (1, 8, T_AUDIO, 16)]


def test_a_part_masked_off_keeps_its_latent(ltx2):
    positive, _ = _conditioning()
    g = torch.Generator().manual_seed(3)
    video, audio = torch.randn(1, 16, F_, H_, W_, generator=g), torch.randn(1, 8, T_AUDIO, 16, generator=g)
    latent = NestedTensor([video, audio])
    noise = prepare_noise(latent, SEED)
    # audio kept (mask 0), video denoised; a video mask alone (not nested) leaves the audio denoised
    mask = NestedTensor([torch.ones(1, 1, F_, H_, W_), torch.zeros(1, 8, T_AUDIO, 16)])
    with torch.no_grad():
        kept = sample(ModelPatcher(ltx2), noise, 2, 1.0, "euler", "simple", positive, positive, latent,
                      noise_mask=mask, seed=SEED)
        plain = sample(ModelPatcher(ltx2), noise, 2, 1.0, "euler", "simple", positive, positive, latent, seed=SEED)
        video_only = sample(ModelPatcher(ltx2), noise, 2, 1.0, "euler", "simple", positive, positive, latent,
                            noise_mask=torch.zeros(1, 1, F_, H_, W_), seed=SEED)
    assert torch.allclose(kept.unbind()[1], audio, atol=1e-6)
    assert not torch.allclose(plain.unbind()[1], audio, atol=1e-3)
    assert torch.allclose(video_only.unbind()[0], video, atol=1e-6)
    assert not torch.allclose(video_only.unbind()[1], audio, atol=1e-3)


def test_nested_latent_needs_nested_noise_of_its_shapes(ltx2):
    positive, _ = _conditioning()
    latent = _empty()
    guider = CFGGuider(ModelPatcher(ltx2))
    guider.set_conds(positive, positive)
    sigmas = torch.tensor([1.0, 0.0])
    with pytest.raises(SamplingError, match="nested noise"):
        guider.sample(torch.zeros(1, 16, F_, H_, W_), latent, sampler_object("euler"), sigmas)
    with pytest.raises(SamplingError, match="noise shapes"):
        guider.sample(NestedTensor([torch.zeros(1, 16, F_, H_, W_)]), latent, sampler_object("euler"), sigmas)
    assert guider.sample(_empty(), latent, sampler_object("euler"), sigmas[:0]) is latent  # no steps: as it is


def test_a_plain_latent_is_not_packed(ltx2):
    """A plain video latent goes through unpacked: the model gets no `latent_shapes`."""
    positive, _ = _conditioning()
    seen = []

    def wrapper(executor, *args, **kwargs):
        seen.append((tuple(args[0].shape), "latent_shapes" in kwargs))
        return executor(*args, **kwargs)

    patcher = ModelPatcher(ltx2)
    patcher.add_wrapper_with_key("apply_model", "probe", wrapper)
    latent = torch.zeros(1, 16, F_, H_, W_)
    with torch.no_grad():
        out = sample(patcher, prepare_noise(latent, SEED), 1, 1.0, "euler", "simple", positive, positive, latent,
                     seed=SEED)
        nested = sample(patcher, prepare_noise(_empty(), SEED), 1, 1.0, "euler", "simple", positive, positive,
                        _empty(), seed=SEED)
    assert isinstance(out, torch.Tensor) and out.shape == latent.shape and nested.is_nested
    assert seen[0] == ((1, 16, F_, H_, W_), False)
    assert seen[1] == ((1, 1, 16 * F_ * H_ * W_ + 8 * T_AUDIO * 16), True)
