"""HiDream-O1's nodes (nodes/hidream_o1_nodes.py) and the general ModelNoiseScale / SamplerLCM
they run with, on a tiny random HiDream-O1 network."""
from __future__ import annotations

import pytest
import torch

from nodes.hidream_o1_nodes import (empty_hidream_o1_latent_image, hidream_o1_patch_seam_smoothing,
                                    hidream_o1_reference_images)
from nodes.model_sampling_nodes import model_noise_scale, model_sampling_sd3
from nodes.sampler_nodes import sampler_lcm
from tests.comfy_core.test_hidream_o1 import prompt_ids, random_network, tiny_config


@pytest.fixture()
def model():
    from comfy_core.families.hidream_o1 import definition
    from comfy_core.models.diffusion import DiffusionModel
    from comfy_core.patching.model import ModelPatcher

    family = definition()
    network = random_network(tiny_config(vision=True))
    return ModelPatcher(DiffusionModel(network, family.sampling.model_sampling("flow", False), family.latent_format,
                                       family=family))


def conditioning(seed: int = 1) -> list:
    ids = prompt_ids(seed=seed)
    return [[ids[..., None].float(), {"text_input_ids": ids}]]


def test_empty_latent_is_pixels():
    (latent,) = empty_hidream_o1_latent_image(96, 64, 2)
    assert latent["samples"].shape == (2, 3, 64, 96) and not latent["samples"].any()


def test_reference_images_in_socket_order_on_both_sides():
    a, b = torch.rand(1, 40, 40, 3), torch.rand(1, 32, 48, 3)
    pos, neg = [[torch.zeros(1, 3, 1), {"x": 1}]], [[torch.zeros(1, 3, 1), {}]]
    p, n = hidream_o1_reference_images(pos, neg, {"image_10": b, "image_2": a})
    assert [r is a for r in p[0][1]["reference_latents"]] == [True, False]
    assert p[0][1]["reference_latents"][1] is b and p[0][1]["x"] == 1
    assert n[0][1]["prompt_type"] == "negative" and len(n[0][1]["reference_latents"]) == 2
    assert "reference_latents" not in pos[0][1]  # inputs untouched
    p2, _ = hidream_o1_reference_images(p, neg, {"image_1": a})
    assert len(p2[0][1]["reference_latents"]) == 3  # appended
    same = hidream_o1_reference_images(pos, neg, {})
    assert same == (pos, neg)


def test_model_noise_scale_scales_the_flow_noise(model):
    (patched,) = model_noise_scale(model, 8.0)
    base = model.get_model_object("model_sampling")
    ms = patched.get_model_object("model_sampling")
    assert ms.noise_scale == 8.0 and base.noise_scale == 1.0
    assert ms.shift == base.shift == 3.0 and ms.multiplier == base.multiplier
    sigma, noise, latent = torch.tensor([0.25]), torch.randn(1, 3, 4, 4), torch.randn(1, 3, 4, 4)
    torch.testing.assert_close(ms.noise_scaling(sigma, noise, latent), 0.25 * 8.0 * noise + 0.75 * latent)
    # ModelSamplingSD3 keeps it, as today's ComfyUI
    (shifted,) = model_sampling_sd3(patched, 2.0)
    assert shifted.get_model_object("model_sampling").noise_scale == 8.0


def test_sampler_lcm_renoises_with_the_model_sampling():
    """sample_lcm re-noises through `noise_scaling` (flow: sigma * s * n + (1 - sigma) * x0), its
    noise clamped and ramped."""
    from comfy_core.models.model_sampling import FlowModelSampling

    (sampler,) = sampler_lcm(2.0, 4.0, 0.5)
    assert sampler.extra_options == {"s_noise": 2.0, "s_noise_end": 4.0, "noise_clip_std": 0.5}
    ms = FlowModelSampling(3.0)
    ms.noise_scale = 8.0
    x0 = torch.full((1, 1, 2, 2), 0.5)
    noises = [torch.tensor([[[[3.0, -1.0], [0.2, 0.0]]]]), torch.tensor([[[[1.0, 1.0], [-1.0, 0.0]]]])]

    class Denoiser:
        model_sampling = ms

        def __call__(self, x, sigma, **kwargs):
            return x0.clone()

    calls = iter(noises)
    sigmas = torch.tensor([1.0, 0.6, 0.3, 0.0])
    out = sampler.sampler_function(Denoiser(), torch.zeros(1, 1, 2, 2), sigmas, extra_args={}, callback=None,
                                   disable=True, noise_sampler=lambda a, b: next(calls), **sampler.extra_options)
    # the last step lands on x0; check the middle re-noising by stopping before it
    torch.testing.assert_close(out, x0)
    calls = iter(noises)
    out = sampler.sampler_function(Denoiser(), torch.zeros(1, 1, 2, 2), sigmas[:3], extra_args={}, callback=None,
                                   disable=True, noise_sampler=lambda a, b: next(calls), **sampler.extra_options)
    n = noises[1]
    n = n.clamp(-0.5 * n.std(), 0.5 * n.std()) * 4.0  # second step: s_noise_end
    torch.testing.assert_close(out, 0.3 * 8.0 * n + 0.7 * x0)


def test_seam_smoothing_blends_rolled_passes(model):
    from comfy_core.families.hidream_o1.seam_smoothing import PatchSeamSmoothing, edge_ramp

    assert hidream_o1_patch_seam_smoothing(model, 0.8, 1.0, "single_shift", "2", "average", 0.0)[0] is model
    assert hidream_o1_patch_seam_smoothing(model, 0.8, 0.5, "single_shift", "2", "average", 1.0)[0] is model
    (patched,) = hidream_o1_patch_seam_smoothing(model, 0.5, 1.0, "single_shift", "2", "average", 1.0)
    assert patched is not model
    wrapper = PatchSeamSmoothing(500.0, 0.0, "single_shift", "2", "average", 1.0)
    x = torch.randn(1, 3, 96, 96)
    seen = []

    def executor(x_in, t, **kwargs):
        seen.append(x_in)
        return x_in * 2.0 + torch.arange(96.0)[None, None, None]  # not roll-equivariant in the columns

    out = wrapper(executor, x, torch.tensor([400.0]))
    assert len(seen) == 2 and torch.equal(seen[1], torch.roll(x, (16, 16), (-2, -1)))
    plain = executor(x, None)
    rolled_back = x * 2.0 + torch.roll(torch.arange(96.0), -16)[None, None, None]
    mask = edge_ramp(96, 96, x.device, x.dtype)
    torch.testing.assert_close(out, plain * (1 - mask) + (plain + rolled_back) / 2 * mask)
    seen.clear()
    torch.testing.assert_close(wrapper(executor, x, torch.tensor([600.0])), plain)  # outside the gate
    assert len(seen) == 1


def test_text_to_image_samples_through_the_nodes(model):
    """ModelNoiseScale -> BasicScheduler -> SamplerLCM -> SamplerCustom on the tiny network: the
    token ids reach the network as its inputs (a different prompt changes the image)."""
    from nodes.custom_sampling import sampler_custom
    from nodes.scheduler_nodes import basic_scheduler

    (scaled,) = model_noise_scale(model, 7.6)
    (smooth,) = hidream_o1_patch_seam_smoothing(scaled, 0.5, 1.0, "single_shift", "ramp_2_4", "median", 1.0)
    (sigmas,) = basic_scheduler(smooth, "normal", 3, 1.0)
    (sampler,) = sampler_lcm(1.0, 1.0, 2.5)
    (latent,) = empty_hidream_o1_latent_image(64, 64, 1)
    out, _ = sampler_custom(smooth, True, 7, 1.0, conditioning(1), conditioning(1), sampler, sigmas, latent)
    other, _ = sampler_custom(smooth, True, 7, 1.0, conditioning(2), conditioning(2), sampler, sigmas, latent)
    assert out["samples"].shape == (1, 3, 64, 64) and torch.isfinite(out["samples"]).all()
    assert (out["samples"] - other["samples"]).abs().max() > 1e-5


def test_reference_image_conditioning_samples(model):
    from comfy_core.sampling.guider import sampler_object
    from nodes.custom_sampling import sampler_custom
    from nodes.scheduler_nodes import basic_scheduler

    pos, neg = hidream_o1_reference_images(conditioning(1), conditioning(3), {"image_1": torch.rand(1, 64, 48, 3)})
    (sigmas,) = basic_scheduler(model, "normal", 2, 1.0)
    (latent,) = empty_hidream_o1_latent_image(64, 64, 1)
    out, _ = sampler_custom(model, True, 3, 2.0, pos, neg, sampler_object("euler"), sigmas, latent)
    plain, _ = sampler_custom(model, True, 3, 2.0, conditioning(1), conditioning(3), sampler_object("euler"),
                              sigmas, latent)
    assert torch.isfinite(out["samples"]).all()
    assert (out["samples"] - plain["samples"]).abs().max() > 1e-5
