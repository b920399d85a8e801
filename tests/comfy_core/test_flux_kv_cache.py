"""The reference K/V cache (comfy_core/model_patches/flux_kv_cache.py) on Flux.2, and Flux.2's
"index_timestep_zero" references (comfy_core/families/flux2/dit.py): numerics against diffusers'
Klein KV model (its "extract" and "cached" modes), the cached call's exactness on unchanged inputs,
whole sampling runs, and the FluxKVCache node."""
from __future__ import annotations

import logging

import pytest
import torch

from comfy_core.families.flux2.dit import REFERENCE_KV
from comfy_core.model_patches.flux_kv_cache import FluxKVCacheError, ReferenceKVCache, apply_flux_kv_cache
from comfy_core.split.diffusion_model import load_diffusion_model
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.flux2_files import (CONTEXT, diffusers_flux2_kwargs, tiny_flux2_state_dict, to_diffusers_layout,
                                        write_flux2_unet)

H, W, RH, RW, T = 2, 3, 3, 2, 4  # image, reference and text sizes (tokens)


@pytest.fixture(scope="module", params=[False, True], ids=["klein", "dev"])
def pair(request, tmp_path_factory):
    pytest.importorskip("diffusers")
    from diffusers import Flux2Transformer2DModel
    from diffusers.models.transformers.transformer_flux2 import (Flux2KVAttnProcessor,
                                                                 Flux2KVParallelSelfAttnProcessor)

    guidance = request.param
    state = tiny_flux2_state_dict(seed=4, guidance=guidance)
    reference = Flux2Transformer2DModel(**diffusers_flux2_kwargs(guidance=guidance))
    reference.load_state_dict(to_diffusers_layout(state), strict=True)
    for block in reference.transformer_blocks:  # the Klein KV model's processors
        block.attn.set_processor(Flux2KVAttnProcessor())
    for block in reference.single_transformer_blocks:
        block.attn.set_processor(Flux2KVParallelSelfAttnProcessor())
    path = save(state, tmp_path_factory.mktemp("flux2kv") / "diffusion_models" / "flux2_tiny.safetensors")
    return reference.eval(), load_diffusion_model(path), guidance


def _ids(h: int, w: int, t: float = 0.0) -> torch.Tensor:
    ids = torch.zeros(h, w, 4)
    ids[..., 0] = t
    ids[..., 1] = torch.arange(h)[:, None]
    ids[..., 2] = torch.arange(w)[None, :]
    return ids.reshape(1, h * w, 4)


def _inputs(seed: int, guidance: bool):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 128, H, W, generator=gen)
    ref = torch.randn(1, 128, RH, RW, generator=gen)
    context = torch.randn(1, T, CONTEXT, generator=gen)
    return x, ref, context, (torch.tensor([3.5]) if guidance else None)


def _live(uuid: str = "c") -> dict:
    return {REFERENCE_KV: ReferenceKVCache().clone_for_run(), "uuids": [uuid]}


def test_filling_and_cached_calls_match_diffusers_klein_kv(pair):
    """diffusers' extract mode lets the references attend only to themselves; the same mask on our
    filling call must give the same image tokens, and both caches must then serve a new step alike."""
    reference, loaded, guidance = pair
    network = loaded.model.diffusion_model
    x, ref, context, g = _inputs(1, guidance)
    n_img, n_ref = H * W, RH * RW
    length = T + n_img + n_ref
    mask = torch.zeros(length, length)
    mask[T + n_img:, :T + n_img] = float("-inf")  # reference queries see reference keys only
    options = _live()
    sigma = torch.tensor([0.8])
    with torch.no_grad():
        ours = network(x, sigma, context, guidance=g, ref_latents=[ref], ref_latents_method="index_timestep_zero",
                       transformer_options=options, attention_mask=mask)
        tokens = torch.cat([ref.flatten(2).transpose(1, 2), x.flatten(2).transpose(1, 2)], 1)
        theirs, kv = reference(hidden_states=tokens, encoder_hidden_states=context, timestep=sigma,
                               img_ids=torch.cat([_ids(RH, RW, 10.0), _ids(H, W)], 1), txt_ids=_text_ids(),
                               guidance=g, return_dict=False, kv_cache_mode="extract", num_ref_tokens=n_ref)
    assert (ours - theirs.transpose(1, 2).reshape(1, 128, H, W)).abs().max() < 1e-4
    assert options[REFERENCE_KV].filling_calls == 1

    x2 = torch.randn(1, 128, H, W, generator=torch.Generator().manual_seed(9))
    sigma2 = torch.tensor([0.3])
    with torch.no_grad():
        ours2 = network(x2, sigma2, context, guidance=g, ref_latents=[ref], ref_latents_method="index_timestep_zero",
                        transformer_options=options)
        theirs2 = reference(hidden_states=x2.flatten(2).transpose(1, 2), encoder_hidden_states=context,
                            timestep=sigma2, img_ids=_ids(H, W), txt_ids=_text_ids(), guidance=g, return_dict=False,
                            kv_cache=kv, kv_cache_mode="cached")[0]
    assert options[REFERENCE_KV].cached_calls == 1
    assert (ours2 - theirs2.transpose(1, 2).reshape(1, 128, H, W)).abs().max() < 1e-4


def _text_ids() -> torch.Tensor:
    ids = torch.zeros(1, T, 4)
    ids[..., 3] = torch.arange(T)
    return ids


def test_a_cached_call_on_unchanged_inputs_equals_the_full_sequence(pair):
    _, loaded, guidance = pair
    network = loaded.model.diffusion_model
    x, ref, context, g = _inputs(2, guidance)
    sigma = torch.tensor([0.6])
    kwargs = dict(guidance=g, ref_latents=[ref], ref_latents_method="index_timestep_zero")
    options = _live()
    with torch.no_grad():
        plain = network(x, sigma, context, **kwargs)
        filled = network(x, sigma, context, transformer_options=options, **kwargs)
        cached = network(x, sigma, context, transformer_options=options, **kwargs)
    assert torch.equal(filled, plain)  # the filling call is the uncached computation
    assert options[REFERENCE_KV].cached_calls == 1
    assert (cached - plain).abs().max() < 1e-5  # only the image/text queries ran, on the kept reference K/V
    # another set of conditionings fills its own entry
    other = {**options, "uuids": ["u"]}
    with torch.no_grad():
        network(x, sigma, context, transformer_options=other, **kwargs)
    assert options[REFERENCE_KV].filling_calls == 2
    # a template (the MODEL's, not a run's) computes plainly and keeps nothing
    template = ReferenceKVCache()
    with torch.no_grad():
        out = network(x, sigma, context, transformer_options={REFERENCE_KV: template, "uuids": ["c"]}, **kwargs)
    assert torch.equal(out, plain) and template.entries == {}


def test_timestep_zero_references_differ_from_index_only_away_from_timestep_zero(pair):
    _, loaded, guidance = pair
    network = loaded.model.diffusion_model
    x, ref, context, g = _inputs(3, guidance)
    with torch.no_grad():
        for sigma, same in ((0.0, True), (0.7, False)):
            s = torch.tensor([sigma])
            index = network(x, s, context, guidance=g, ref_latents=[ref], ref_latents_method="index")
            zero = network(x, s, context, guidance=g, ref_latents=[ref], ref_latents_method="index_timestep_zero")
            assert torch.allclose(index, zero, atol=1e-6) == same
        # the network's default method is what the conditioning falls back to
        network.default_ref_method = "index_timestep_zero"
        try:
            default = network(x, torch.tensor([0.7]), context, guidance=g, ref_latents=[ref])
        finally:
            network.default_ref_method = "index"
    assert torch.equal(default, zero)


# -- the patch on a MODEL, and sampling runs -------------------------------------------------------

@pytest.fixture(scope="module")
def klein(tmp_path_factory):
    return load_diffusion_model(write_flux2_unet(tmp_path_factory.mktemp("klein"), seed=3, guidance=False))


def test_the_patch_is_data_on_a_clone(klein):
    patched = apply_flux_kv_cache(klein)
    assert REFERENCE_KV not in (klein.model_options.get("transformer_options") or {})
    assert isinstance(patched.model_options["transformer_options"][REFERENCE_KV], ReferenceKVCache)
    assert patched.object_patches["diffusion_model.default_ref_method"] == "index_timestep_zero"
    assert "diffusion_model.default_ref_method" not in klein.object_patches
    assert klein.model.diffusion_model.default_ref_method == "index"
    with pytest.raises(FluxKVCacheError, match="already carries"):
        apply_flux_kv_cache(patched)


def test_a_model_without_the_cache_is_refused(tmp_path):
    from tests.fixtures.flux_files import write_tiny_flux

    flux1 = load_diffusion_model(write_tiny_flux(tmp_path / "diffusion_models" / "flux1.safetensors"))
    with pytest.raises(FluxKVCacheError, match="does not run a reference K/V cache"):
        apply_flux_kv_cache(flux1)


def _sample(model, steps: int, method: str | None = None) -> torch.Tensor:
    from comfy_core.sampling.ksampler import sample

    gen = torch.Generator().manual_seed(11)
    extra = {"reference_latents": [torch.randn(1, 128, 2, 2, generator=gen)]}
    if method is not None:
        extra["reference_latents_method"] = method
    positive = [[torch.randn(1, 5, CONTEXT, generator=gen), dict(extra)]]
    negative = [[torch.zeros(1, 5, CONTEXT), dict(extra)]]
    noise = torch.randn(1, 128, 2, 3, generator=torch.Generator().manual_seed(0))
    return sample(model, noise, steps, 1.0, "euler", "simple", positive, negative, torch.zeros(1, 128, 2, 3))


def test_sampling_fills_once_then_reads_and_keeps_nothing_between_runs(klein, caplog):
    patched = apply_flux_kv_cache(klein)
    with caplog.at_level(logging.INFO, logger="comfy_core.model_patches.flux_kv_cache"):
        first = _sample(patched, 3)
        second = _sample(patched, 3)
    counts = [r.getMessage() for r in caplog.records if r.getMessage().startswith("FluxKVCache")]
    assert counts == ["FluxKVCache - 1 filling calls, 2 cached calls"] * 2
    assert torch.equal(first, second)
    template = patched.model_options["transformer_options"][REFERENCE_KV]
    assert not template.live and template.entries == {}
    # one step is the filling call alone: the uncached model with timestep-zero references
    assert torch.equal(_sample(patched, 1), _sample(klein, 1, method="index_timestep_zero"))
    # three steps read the cache: close to, not the same as, recomputing the references every step
    full = _sample(klein, 3, method="index_timestep_zero")
    assert not torch.equal(first, full) and torch.isfinite(first).all()
