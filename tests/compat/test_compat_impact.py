"""Impact-Pack's and UltimateSDUpscale's ways of sampling through ComfyUI's API, on our runtime,
through the fixture pack tests/compat/api_packs/impact_like_pack: each equals the built-in node
it reimplements bit for bit on a tiny random SD1 checkpoint."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

PACK = Path(__file__).parent / "api_packs" / "impact_like_pack" / "__init__.py"


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    model, clip, vae = load_checkpoint(tiny_sd1_ckpt)
    return model, clip, vae, clip_text_encode("a cat", clip)[0], clip_text_encode("blurry", clip)[0]


@pytest.fixture
def pack(session):
    spec = importlib.util.spec_from_file_location("impact_like_pack_fixture", PACK,
                                                  submodule_search_locations=[str(PACK.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def _latent():
    return {"samples": torch.zeros(1, 4, 8, 8)}


def _ksampler_node(model, pos, neg, sampler, scheduler, steps=2, cfg=3.0, seed=5, denoise=1.0):
    from nodes.sampling import ksampler

    return ksampler(model, seed, steps, cfg, sampler, scheduler, pos, neg, _latent(), denoise)[0]["samples"]


@pytest.mark.parametrize("sampler,scheduler,denoise", [("euler", "normal", 1.0), ("euler_ancestral", "karras", 1.0),
                                                        ("dpmpp_2m", "simple", 0.6)])
def test_basic_pipe_sample_with_custom_noise_equals_the_ksampler_node(pack, sd1, sampler, scheduler, denoise) -> None:
    model, clip, vae, pos, neg = sd1
    pipe = (model, clip, vae, pos, neg)
    out_pipe, latent = pack.ImpactLikeKSamplerBasicPipe().sample(pipe, 5, 2, 3.0, sampler, scheduler, _latent(),
                                                                 denoise)
    assert out_pipe is pipe
    assert torch.equal(latent["samples"], _ksampler_node(model, pos, neg, sampler, scheduler, denoise=denoise))


def test_impact_ksampler_around_dpmpp_sde_with_its_brownian_tree_equals_the_node(pack, sd1) -> None:
    # ComfyUI's dpmpp_sde draws from BrownianTreeNoiseSampler(x, sigma_min, sigma_max, seed, cpu=True)
    # itself, so Impact's KSAMPLER that builds the same one reproduces the node exactly.
    model, _clip, _vae, pos, neg = sd1
    (latent,) = pack.ImpactLikeSDESampler().sample(model, pos, neg, _latent(), 5, 3, 3.0)
    assert torch.equal(latent["samples"], _ksampler_node(model, pos, neg, "dpmpp_sde", "karras", steps=3))


def test_usdu_tile_sampling_through_sampler_custom_equals_the_node(pack, sd1) -> None:
    import comfy.samplers
    from comfy_extras.nodes_custom_sampler import SamplerCustom

    from nodes.custom_sampling import sampler_custom

    model, _clip, _vae, pos, neg = sd1
    # V3 today: USDU takes its `SamplerCustom.execute(...)` branch (`sample` is the same classmethod)
    assert SamplerCustom.__dict__["sample"] is SamplerCustom.__dict__["execute"]
    assert SamplerCustom.FUNCTION == "EXECUTE_NORMALIZED"
    sampler = comfy.samplers.sampler_object("euler")
    sigmas = comfy.samplers.calculate_sigmas(model.get_model_object("model_sampling"), "normal", 2)
    (latent,) = pack.UsduLikeTileSampler().sample(model, pos, neg, _latent(), sampler, sigmas, 5, 3.0)
    node = sampler_custom(model, True, 5, 3.0, pos, neg, sampler, sigmas, _latent())[0]
    assert torch.equal(latent["samples"], node["samples"])


def test_v3_node_output_indexes_like_comfyui() -> None:
    from compat.v3.io import NodeOutput

    out = NodeOutput(1, "two", ui={"images": []})
    first, second = out
    assert (first, second, out[0], out[-1], out[:1]) == (1, "two", 1, "two", (1,))
    with pytest.raises(IndexError):
        out[2]
