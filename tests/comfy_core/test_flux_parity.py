"""Flux.1 numerics against an independent implementation (diffusers' `FluxTransformer2DModel`,
test-only) on the same tiny random weights: dev (guidance embedding), schnell (none), odd latent
sizes (circular padding to the patch) and Kontext's reference latents appended to the sequence.
Patchifying and position ids on the diffusers side are diffusers' own pipeline helpers."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families.flux.dit import FluxConfig, FluxTransformer as Flux
from tests.fixtures.flux_files import diffusers_flux_kwargs, tiny_flux_diffusers_state_dict, tiny_flux_state_dict

pytest.importorskip("diffusers")
from diffusers import FluxTransformer2DModel  # noqa: E402
from diffusers.pipelines.flux.pipeline_flux import FluxPipeline  # noqa: E402


def _ours(guidance: bool, seed: int = 1) -> Flux:
    state = tiny_flux_state_dict(guidance, seed=seed)
    with torch.device("meta"):
        model = Flux.from_config(FluxConfig.detect_from_weights(state, ""))
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


def _theirs(guidance: bool, seed: int = 1) -> FluxTransformer2DModel:
    model = FluxTransformer2DModel(**diffusers_flux_kwargs(guidance))
    model.load_state_dict(tiny_flux_diffusers_state_dict(guidance, seed=seed), strict=True)
    return model.eval()


def _pack(x: torch.Tensor) -> torch.Tensor:
    b, c, h, w = x.shape
    return FluxPipeline._pack_latents(x, b, c, h, w)


def _ids(h: int, w: int, index: float = 0.0) -> torch.Tensor:
    ids = FluxPipeline._prepare_latent_image_ids(1, h // 2, w // 2, "cpu", torch.float32)
    ids[:, 0] = index
    return ids


def _unpack(tokens: torch.Tensor, h: int, w: int) -> torch.Tensor:
    return FluxPipeline._unpack_latents(tokens, h * 8, w * 8, 8)


def _inputs(seed: int, h: int = 8, w: int = 8) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 16, h, w, generator=gen)
    context = torch.randn(2, 5, 32, generator=gen)
    pooled = torch.randn(2, 24, generator=gen)
    return x, context, pooled


@pytest.mark.parametrize("guidance", [True, False], ids=["dev", "schnell"])
def test_flux_matches_diffusers(guidance):
    ours, theirs = _ours(guidance), _theirs(guidance)
    x, context, pooled = _inputs(0)
    sigma = torch.tensor([0.93, 0.25])
    g = torch.tensor([3.5, 1.0]) if guidance else None
    with torch.no_grad():
        a = ours(x, sigma, context, y=pooled, guidance=g)
        b = theirs(_pack(x), encoder_hidden_states=context, pooled_projections=pooled, timestep=sigma,
                   img_ids=_ids(8, 8), txt_ids=torch.zeros(5, 3), guidance=g).sample
    b = _unpack(b, 8, 8)
    assert a.shape == x.shape
    assert a.abs().max() > 0.5
    assert (a - b).abs().max() < 1e-4


def test_guidance_value_changes_the_dev_output():
    ours = _ours(True)
    x, context, pooled = _inputs(1)
    sigma = torch.tensor([0.5, 0.5])
    with torch.no_grad():
        a = ours(x, sigma, context, y=pooled, guidance=torch.tensor([1.0, 1.0]))
        b = ours(x, sigma, context, y=pooled, guidance=torch.tensor([4.0, 4.0]))
    assert (a - b).abs().max() > 1e-3


def test_odd_latent_is_padded_circularly_and_cropped():
    ours, theirs = _ours(True), _theirs(True)
    x, context, pooled = _inputs(2, h=7, w=9)
    sigma, g = torch.tensor([0.7, 0.4]), torch.tensor([2.0, 5.0])
    padded = F.pad(x, (0, 1, 0, 1), mode="circular")  # [2, 16, 8, 10]
    with torch.no_grad():
        a = ours(x, sigma, context, y=pooled, guidance=g)
        b = theirs(_pack(padded), encoder_hidden_states=context, pooled_projections=pooled, timestep=sigma,
                   img_ids=_ids(8, 10), txt_ids=torch.zeros(5, 3), guidance=g).sample
    b = _unpack(b, 8, 10)[:, :, :7, :9]
    assert a.shape == x.shape
    assert (a - b).abs().max() < 1e-4


def test_kontext_reference_latent_matches_diffusers_on_the_joint_sequence():
    """One reference latent (ComfyUI's default "offset" method): its tokens follow the image's with
    ids (1, row, col), as diffusers' FluxKontextPipeline builds them; the output is the image part."""
    ours, theirs = _ours(True), _theirs(True)
    x, context, pooled = _inputs(3)
    ref = torch.randn(2, 16, 6, 10, generator=torch.Generator().manual_seed(9))
    sigma, g = torch.tensor([0.8, 0.2]), torch.tensor([2.5, 2.5])
    with torch.no_grad():
        a = ours(x, sigma, context, y=pooled, guidance=g, ref_latents=[ref])
        plain = ours(x, sigma, context, y=pooled, guidance=g)
        tokens = torch.cat([_pack(x), _pack(ref)], dim=1)
        ids = torch.cat([_ids(8, 8), _ids(6, 10, index=1.0)], dim=0)
        b = theirs(tokens, encoder_hidden_states=context, pooled_projections=pooled, timestep=sigma, img_ids=ids,
                   txt_ids=torch.zeros(5, 3), guidance=g).sample
    b = _unpack(b[:, :16], 8, 8)
    assert a.shape == x.shape
    assert (a - b).abs().max() < 1e-4
    assert (a - plain).abs().max() > 1e-3
