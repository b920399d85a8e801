"""A diffusers-named LoRA on our Flux / MMDiT against an independent implementation: diffusers'
`FluxTransformer2DModel` / `SD3Transformer2DModel` (test-only) on the same tiny weights, with the
LoRA merged by hand into diffusers' own state dict (`W += strength * alpha/rank * B @ A` per
diffusers name). Our side loads it through the key map (fused-weight slices, the final adaLN's
swapped halves) and the patcher."""
from __future__ import annotations

import pytest
import torch

from comfy_core.lora import load_lora_for_models
from tests.fixtures.dit_loras import (FLUX_DIFFUSERS, MMDIT_DIFFUSERS, lora_in_spelling, random_factors,
                                      tiny_flux_model, tiny_mmdit_model)
from tests.fixtures.flux_files import (diffusers_flux_kwargs, tiny_flux_diffusers_state_dict, tiny_flux_params,
                                       to_diffusers_layout)

diffusers = pytest.importorskip("diffusers")
from diffusers.pipelines.flux.pipeline_flux import FluxPipeline  # noqa: E402

RANK, ALPHA, STRENGTH = 4, 3.0, 0.9


def merged(state: dict[str, torch.Tensor], lora: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """diffusers weights with a PEFT-named LoRA (`transformer.<name>.lora_A/B.weight`) merged in."""
    out = dict(state)
    for key in lora:
        if key.endswith(".lora_A.weight"):
            layer = key[len("transformer."):-len(".lora_A.weight")]
            down, up = lora[key], lora[key.replace(".lora_A.", ".lora_B.")]
            out[layer + ".weight"] = state[layer + ".weight"] + STRENGTH * (ALPHA / RANK) * up @ down
    return out


def test_flux_lora_matches_diffusers_with_the_lora_merged():
    seed = 2
    model = tiny_flux_model(seed=seed)
    lora = lora_in_spelling(random_factors(model, list(FLUX_DIFFUSERS), seed=5, rank=RANK, scale=0.3), "diffusers",
                            FLUX_DIFFUSERS, ALPHA)
    patched, _, report = load_lora_for_models(model, None, lora, STRENGTH, 0.0)
    assert report.unmatched == []
    theirs = diffusers.FluxTransformer2DModel(**diffusers_flux_kwargs(True))
    theirs.load_state_dict(merged(tiny_flux_diffusers_state_dict(True, seed=seed), lora), strict=True)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 16, 8, 8, generator=gen)
    context, pooled = torch.randn(1, 5, 32, generator=gen), torch.randn(1, 24, generator=gen)
    sigma, guidance = torch.tensor([0.6]), torch.tensor([3.5])
    ids = FluxPipeline._prepare_latent_image_ids(1, 4, 4, "cpu", torch.float32)
    with torch.no_grad():
        b = theirs.eval()(FluxPipeline._pack_latents(x, 1, 16, 8, 8), encoder_hidden_states=context,
                          pooled_projections=pooled, timestep=sigma, img_ids=ids, txt_ids=torch.zeros(5, 3),
                          guidance=guidance).sample
        b = FluxPipeline._unpack_latents(b, 64, 64, 8)
        with patched.applied() as module:
            a = module.diffusion_model(x, sigma, context, y=pooled, guidance=guidance)
        with model.applied() as module:
            plain = module.diffusion_model(x, sigma, context, y=pooled, guidance=guidance)
    assert (a - plain).abs().max() > 1e-2  # the LoRA matters ...
    assert (a - b).abs().max() < 1e-4  # ... and is the one diffusers' names say


def test_flux_patched_weights_in_diffusers_layout_equal_the_hand_merge():
    """Weight by weight: our patched BFL tensors, split into diffusers names by the fixture's own
    converter, equal diffusers' weights with the LoRA merged."""
    model = tiny_flux_model(seed=4)
    lora = lora_in_spelling(random_factors(model, list(FLUX_DIFFUSERS), seed=6, rank=RANK), "diffusers",
                            FLUX_DIFFUSERS, ALPHA)
    patched, _, _ = load_lora_for_models(model, None, lora, STRENGTH, 0.0)
    with patched.applied() as module:
        ours = {k[len("diffusion_model."):]: v.detach().clone() for k, v in module.state_dict().items()}
    ours = to_diffusers_layout(ours, tiny_flux_params(True))
    expected = merged(tiny_flux_diffusers_state_dict(True, seed=4), lora)
    assert sorted(ours) == sorted(expected)
    for key in expected:
        torch.testing.assert_close(ours[key], expected[key], atol=1e-6, rtol=0, msg=key)


@pytest.mark.parametrize("variant", ["sd35", "sd35_medium"])
def test_sd3_lora_matches_diffusers_with_the_lora_merged(variant):
    from comfy_core.families.sd3.keys import convert_diffusers_state_dict
    from tests.comfy_core.test_mmdit_parity import diffusers_kwargs
    from tests.fixtures.mmdit_files import tiny_diffusers_mmdit_state_dict

    state = tiny_diffusers_mmdit_state_dict(variant, seed=3)
    model = tiny_mmdit_model(variant, seed=0)
    model.model.diffusion_model.load_state_dict(convert_diffusers_state_dict(state), strict=True, assign=True)
    pieces = dict(MMDIT_DIFFUSERS)
    if variant == "sd35_medium":
        pieces["joint_blocks.0.x_block.attn2.qkv"] = [("transformer_blocks.0.attn2.to_q", 0, 128),
                                                      ("transformer_blocks.0.attn2.to_k", 128, 128),
                                                      ("transformer_blocks.0.attn2.to_v", 256, 128)]
        del pieces["joint_blocks.0.x_block.adaLN_modulation.1"]  # 9 x width in MMDiT-X blocks
    lora = lora_in_spelling(random_factors(model, list(pieces), seed=7, rank=RANK, scale=0.3), "diffusers",
                            pieces, ALPHA)
    patched, _, report = load_lora_for_models(model, None, lora, STRENGTH, 0.0)
    assert report.unmatched == [] and report.skipped == []
    theirs = diffusers.SD3Transformer2DModel(**diffusers_kwargs(variant))
    theirs.load_state_dict(merged(state, lora), strict=True)
    gen = torch.Generator().manual_seed(1)
    x, t = torch.randn(1, 16, 8, 8, generator=gen), torch.tensor([500.0])
    context, y = torch.randn(1, 5, 64, generator=gen), torch.randn(1, 64, generator=gen)
    with torch.no_grad():
        b = theirs.eval()(hidden_states=x, encoder_hidden_states=context, pooled_projections=y, timestep=t).sample
        with patched.applied() as module:
            a = module.diffusion_model(x, t, context=context, y=y)
        with model.applied() as module:
            plain = module.diffusion_model(x, t, context=context, y=y)
    assert (a - plain).abs().max() > 1e-2
    assert (a - b).abs().max() < 1e-4
