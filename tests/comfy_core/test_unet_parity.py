"""UNet numerics against an independent implementation (diffusers, test-only) on the same tiny
random weights, converted from our LDM layout by diffusers' own single-file converter."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from comfy_core.models.diffusion import ADM_SDXL, ADM_SDXL_REFINER, DiffusionModel
from comfy_core.families.sdxl.latent_format import sdxl_latent_format
from comfy_core.models.unet import UNetConfig, UNetModel
from tests.fixtures.checkpoints import tiny_state_dict

pytest.importorskip("diffusers")
from tests.fixtures.diffusers_oracle import diffusers_unet  # noqa: E402

PREFIX = "model.diffusion_model."


def _ours(family: str, state: dict) -> UNetModel:
    config = UNetConfig.detect_from_weights(state, PREFIX)
    heads = dict(num_heads=8, num_head_channels=-1) if family == "sd1" else dict(num_heads=-1, num_head_channels=64)
    with torch.device("meta"):
        model = UNetModel(dataclasses.replace(config, **heads))
    model.load_state_dict({k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)},
                          strict=True, assign=True)
    return model.eval()


@pytest.mark.parametrize("family", ["sd1", "sd2"])
def test_unet_matches_diffusers(family):
    state = tiny_state_dict(family, seed=1)
    ours, theirs = _ours(family, state), diffusers_unet(family, state)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 8, 8, generator=gen)
    t = torch.tensor([999.0, 21.0])
    context = torch.randn(2, 7, ours.config.context_dim, generator=gen)
    with torch.no_grad():
        a = ours(x, t, context)
        b = theirs(x, t, encoder_hidden_states=context).sample
    assert a.abs().max() > 0.1
    assert (a - b).abs().max() < 1e-4


@pytest.mark.parametrize("family, adm", [("sdxl", ADM_SDXL), ("sdxl_refiner", ADM_SDXL_REFINER)])
def test_sdxl_unet_and_size_conditioning_match_diffusers(family, adm):
    state = tiny_state_dict(family, seed=2)
    ours, theirs = _ours(family, state), diffusers_unet(family, state)
    wrapper = DiffusionModel(ours, model_sampling=None, latent_format=sdxl_latent_format(), adm=adm)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 8, 6, generator=gen)
    t = torch.tensor([500.0, 3.0])
    context = torch.randn(2, 5, ours.config.context_dim, generator=gen)
    pooled = torch.randn(2, 64, generator=gen)
    if adm == ADM_SDXL:
        y = wrapper.encode_adm(pooled_output=pooled, width=48, height=64, crop_w=8, crop_h=0,
                               target_width=96, target_height=128)
        time_ids = torch.tensor([[64.0, 48.0, 0.0, 8.0, 128.0, 96.0]] * 2)
    else:
        y = wrapper.encode_adm(pooled_output=pooled, width=48, height=64, prompt_type="negative")
        time_ids = torch.tensor([[64.0, 48.0, 0.0, 0.0, 2.5]] * 2)
    with torch.no_grad():
        a = ours(x, t, context, y=y)
        b = theirs(x, t, encoder_hidden_states=context,
                   added_cond_kwargs={"text_embeds": pooled, "time_ids": time_ids}).sample
    assert a.shape == (2, 4, 8, 6)
    assert (a - b).abs().max() < 1e-4


def test_unet_requires_y_exactly_when_it_has_a_label_embedding():
    state = tiny_state_dict("sdxl")
    ours = _ours("sdxl", state)
    with pytest.raises(ValueError, match="ADM"):
        ours(torch.zeros(1, 4, 8, 8), torch.tensor([1.0]), torch.zeros(1, 2, 128))


def test_block_patches_from_transformer_options_are_applied():
    state = tiny_state_dict("sd1", seed=3)
    ours = _ours("sd1", state)
    x, t, ctx = torch.randn(1, 4, 8, 8), torch.tensor([10.0]), torch.randn(1, 3, 64)
    seen = []

    def attn2_replace(q, k, v, extra):
        seen.append((extra["block"], extra["block_index"], extra["transformer_index"], extra["n_heads"]))
        return torch.zeros_like(q)

    def output_patch(h, skip, options):
        return h, skip * 0.0

    with torch.no_grad():
        plain = ours(x, t, ctx)
        same = ours(x, t, ctx, transformer_options={"patches": {}})
        replaced = ours(x, t, ctx, transformer_options={"patches_replace": {"attn2": {("input", 1): attn2_replace}}})
        patched = ours(x, t, ctx, transformer_options={"patches": {"output_block_patch": [output_patch]}})
    assert torch.allclose(plain, same, atol=1e-6)
    assert seen == [(("input", 1), 0, 0, 8)]
    assert not torch.allclose(plain, replaced, atol=1e-4)
    assert not torch.allclose(plain, patched, atol=1e-4)
