"""PerturbedAttentionGuidance, SelfAttentionGuidance, PerpNeg, DifferentialDiffusion and FreSca:
the hook each adds to a clone, sampled results against independent expectations on the tiny SD1
model, and typed errors."""
from __future__ import annotations

import pytest
import torch

from comfy_core.model_patches.fresca import FreSca
from comfy_core.model_patches.pag import PerturbedAttentionGuidance
from nodes import guidance_nodes as gn
from nodes.errors import NodeInputError
from tests.nodes.model_patch_helpers import sample, snapshot


@pytest.fixture(scope="module")
def sd1(sd1_with_prompts):
    return sd1_with_prompts


def test_pag_at_scale_zero_is_the_unpatched_run_bit_for_bit_and_changes_it_otherwise(sd1) -> None:
    before = snapshot(sd1.model)
    (zero,) = gn.perturbed_attention_guidance(sd1.model, 0.0)
    assert zero.model_options["sampler_post_cfg_function"] == [PerturbedAttentionGuidance(0.0)]
    assert snapshot(sd1.model) == before
    plain = sample(sd1.model, sd1)
    assert torch.equal(sample(zero, sd1), plain)
    assert not torch.equal(sample(gn.perturbed_attention_guidance(sd1.model, 3.0)[0], sd1), plain)


def test_pag_moves_the_cfg_result_away_from_the_identity_attention_prediction(sd1) -> None:
    """One step (lands on the guided x0): cfg + 2 * (cond - cond with the middle block's
    self-attention replaced by v), the perturbed prediction computed here by its own patch."""
    from comfy_core.model_patches.pag import identity_attention

    seen = {}
    probe = sd1.model.clone()

    def record(args):  # noqa: ANN001, ANN202
        seen.update(args)
        return args["denoised"]
    probe.add_option_function("sampler_post_cfg_function", record)
    (patched,) = gn.perturbed_attention_guidance(probe, 2.0)
    out = sample(patched, sd1, steps=1)
    perturbed_model = sd1.model.clone()
    perturbed_model.set_block_replace("attn1", ("middle", 0), identity_attention)
    perturbed = sample(perturbed_model, sd1, steps=1, cfg=1.0)  # cfg 1: the positive alone
    expected = seen["denoised"] / 0.18215 + 2.0 * (seen["cond_denoised"] / 0.18215 - perturbed)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-3)


def test_sag_at_scale_zero_equals_the_unpatched_run_with_the_naive_backend(sd1) -> None:
    """The recorder computes attention with the naive backend's arithmetic, so with that backend
    the only change at scale 0 is none; at 0.8 the result moves."""
    naive = sd1.model.clone()
    naive.set_attention_backend("naive")
    (zero,) = gn.self_attention_guidance(naive, 0.0, 2.0)
    assert zero.model_options["disable_cfg1_optimization"] is True
    recorder = zero.model_options["transformer_options"]["patches_replace"]["attn1"][("middle", 0, 0)]
    assert recorder.store is zero.model_options["sampler_post_cfg_function"][0].store
    # 16 px: the middle block's map is 2x2 tokens, the smallest grid the blur's mask varies over
    # (a 32 px latent costs ~10x more with the naive backend, for the same check).
    plain = sample(naive, sd1, size=16)
    assert torch.equal(sample(zero, sd1, size=16), plain)
    assert not torch.allclose(sample(gn.self_attention_guidance(naive, 0.8, 2.0)[0], sd1, size=16), plain)
    # Latents of 4 px or less (too small for the blur's padding) are left alone; at 8 px the
    # middle block's map is one token (ComfyUI fails to lay it out there; here it is 1x1).
    assert torch.equal(sample(gn.self_attention_guidance(naive, 0.8, 2.0)[0], sd1, size=4), sample(naive, sd1, size=4))
    assert torch.isfinite(sample(gn.self_attention_guidance(naive, 0.8, 2.0)[0], sd1, size=8)).all()


def test_perp_neg_node_equals_the_perp_neg_guider(sd1) -> None:
    from nodes.custom_sampling import perp_neg_guider, random_noise, sampler_custom_advanced
    from nodes.sampler_nodes import ksampler_select
    from nodes.scheduler_nodes import basic_scheduler

    # An "empty" prompt unlike the negative one: with the two equal, perp-neg is plain CFG.
    empty = [[sd1.negative[0][0] * 0.5 + 0.3, dict(sd1.negative[0][1])]]
    (patched,) = gn.perp_neg(sd1.model, empty, 0.7)
    out = sample(patched, sd1, cfg=5.0, positive=sd1.positive)
    (guider,) = perp_neg_guider(sd1.model, sd1.positive, sd1.negative, empty, 5.0, 0.7)
    (sigmas,) = basic_scheduler(sd1.model, "simple", 2, 1.0)
    from types import SimpleNamespace

    from graph.context import NodeContext, reset_current, set_current
    token = set_current(NodeContext("p", "1", "1", None, SimpleNamespace(preview_method="none")))
    try:
        ref = sampler_custom_advanced(random_noise(3)[0], guider, ksampler_select("euler")[0], sigmas,
                                      {"samples": torch.zeros(1, 4, 16, 16)})[0]["samples"]
    finally:
        reset_current(token)
    # Latents of magnitude ~100; the two paths batch the conditions differently, which some CPUs'
    # kernels round differently (seen: 1.3e-3 on one of 1024 values); a wrong formula is off by far more.
    torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-2)
    with pytest.raises(NodeInputError, match="empty_conditioning"):
        gn.perp_neg(sd1.model, "nothing", 1.0)


def test_differential_diffusion_thresholds_the_inpainting_mask(sd1) -> None:
    from comfy_core.model_patches.differential_diffusion import DifferentialDiffusion

    (patched,) = gn.differential_diffusion(sd1.model)
    assert patched.model_options["denoise_mask_function"] == DifferentialDiffusion(1.0)
    assert "denoise_mask_function" not in sd1.model.model_options
    ramp = torch.linspace(0, 1, 16).repeat(16, 1)[None]  # a soft mask, 0 on the left to 1 on the right
    latent = {"samples": torch.randn(1, 4, 16, 16, generator=torch.Generator().manual_seed(1)), "noise_mask": ramp}
    plain = sample(sd1.model, sd1, latent=latent)
    soft = sample(patched, sd1, latent=latent)
    assert not torch.equal(plain, soft)
    # Where the mask is 0 every step keeps the original (binary or not); where it is 1 every step denoises.
    torch.testing.assert_close(soft[..., 0], latent["samples"][..., 0])
    (half,) = gn.differential_diffusion(sd1.model, 0.5)
    assert half.model_options["denoise_mask_function"].strength == 0.5


def test_fresca_node_adds_its_pre_cfg_hook(sd1) -> None:
    (patched,) = gn.fresca(sd1.model, 1.0, 1.25, 20)
    assert patched.model_options["sampler_pre_cfg_function"] == [FreSca(1.0, 1.25, 20)]
    plain = sample(sd1.model, sd1)
    # Unit scales: the guidance through an FFT round trip, equal up to its rounding.
    torch.testing.assert_close(sample(gn.fresca(sd1.model, 1.0, 1.0, 20)[0], sd1), plain, rtol=1e-4, atol=1e-3)
    assert not torch.allclose(sample(patched, sd1), plain)
    with pytest.raises(NodeInputError, match="freq_cutoff"):
        gn.fresca(sd1.model, 1.0, 1.0, 0)


def test_bad_models_are_typed_errors() -> None:
    for fn, extra in ((gn.perturbed_attention_guidance, (1.0,)), (gn.self_attention_guidance, (0.5, 2.0)),
                      (gn.differential_diffusion, ()), (gn.fresca, (1.0, 1.0, 2))):
        with pytest.raises(NodeInputError, match="model"):
            fn("not a model", *extra)
