"""EmptyFlux2LatentImage and Flux2Scheduler (today's ComfyUI, comfy_extras/nodes_flux.py), and a
FLUX.2 Klein workflow on tiny files: UNETLoader + CLIPLoader type "flux2" + VAELoader, a 2-step
KSampler and SamplerCustom with Flux2Scheduler, VAEDecode / VAEEncode."""
from __future__ import annotations

import logging
import math

import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from nodes import flux2_nodes as f2
from nodes.conditioning import clip_text_encode
from nodes.custom_sampling import sampler_custom
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.latent import vae_decode, vae_encode
from nodes.loaders import clip_loader, unet_loader, vae_loader
from nodes.sampler_nodes import ksampler_select
from nodes.sampling import ksampler
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.flux2_files import tiny_flux2_state_dict, write_flux2_vae
from tests.fixtures.qwen3_files import tiny_qwen3_state_dict, write_qwen3_file


def test_empty_latent_is_128_channels_at_a_sixteenth():
    (latent,) = f2.empty_flux2_latent_image(64, 48, 2)
    assert latent["samples"].shape == (2, 128, 3, 4) and not latent["samples"].any()
    assert latent["downscale_ratio_spacial"] == 16
    with pytest.raises(NodeInputError, match="width"):
        f2.empty_flux2_latent_image(8, 32, 1)
    with pytest.raises(NodeInputError, match="batch_size"):
        f2.empty_flux2_latent_image(32, 32, 0)


def _reference_sigmas(steps: int, width: int, height: int) -> torch.Tensor:
    # diffusers' Flux2Pipeline fit of mu, and the exponential time shift, in float64
    from diffusers.pipelines.flux2.pipeline_flux2 import compute_empirical_mu

    mu = compute_empirical_mu(round(width * height / 256), steps)
    t = torch.linspace(1, 0, steps + 1, dtype=torch.float64)
    return math.exp(mu) / (math.exp(mu) + (1 / t - 1))


@pytest.mark.parametrize("steps,width,height", [(20, 1024, 1024), (4, 512, 768), (50, 2048, 1536), (1, 16, 16)])
def test_scheduler_is_flux2s_fitted_shift(steps, width, height):
    pytest.importorskip("diffusers")
    (sigmas,) = f2.flux2_scheduler(steps, width, height)
    assert sigmas.dtype == torch.float32 and sigmas.shape == (steps + 1,)
    assert abs(float(sigmas[0]) - 1.0) < 1e-6 and sigmas[-1] == 0.0
    torch.testing.assert_close(sigmas.double(), _reference_sigmas(steps, width, height), atol=1e-6, rtol=1e-6)
    with pytest.raises(NodeInputError, match="steps"):
        f2.flux2_scheduler(0, width, height)


# --- a Klein workflow on tiny files ----------------------------------------------------------------------

QWEN_LAYERS = 28  # Klein reads blocks 9 / 18 / 27


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("klein")
    models = root / "models"
    # the tiny Qwen3 is 32 wide: Klein's context is its three stacked blocks, 96 wide
    save(tiny_flux2_state_dict(seed=0, guidance=False, context=96),
         models / "diffusion_models" / "flux2_klein_tiny.safetensors")
    write_qwen3_file(models / "text_encoders" / "qwen_3_4b.safetensors",
                     tiny_qwen3_state_dict(seed=1, num_hidden_layers=QWEN_LAYERS))
    write_flux2_vae(models, seed=2)
    return root


@pytest.fixture
def env(models):
    token = set_current(NodeContext("p", "1", "1", None, Environment.rooted_at(models, mmap=False)))
    yield
    reset_current(token)


def test_klein_workflow_samples_and_decodes(env):
    (model,) = unet_loader("flux2_klein_tiny.safetensors", "default")
    assert model.model.family.name == "flux2_klein"
    (clip,) = clip_loader("qwen_3_4b.safetensors", "flux2")
    (vae,) = vae_loader("flux2_vae_tiny.safetensors")
    (positive,) = clip_text_encode("a red fox in the snow", clip)
    (negative,) = clip_text_encode("", clip)
    assert positive[0][0].shape == (1, 512, 96)
    latent = {"samples": torch.zeros(1, 128, 4, 4)}  # the tiny VAE is 4x down: 16 x 16 pixels
    (out,) = ksampler(model, 7, 2, 4.0, "euler", "simple", positive, negative, latent)
    assert out["samples"].shape == (1, 128, 4, 4) and torch.isfinite(out["samples"]).all()
    (again,) = ksampler(model, 7, 2, 4.0, "euler", "simple", positive, negative, latent)
    assert torch.equal(out["samples"], again["samples"])  # seeded
    (image,) = vae_decode(out, vae)
    assert image.shape == (1, 16, 16, 3) and 0.0 <= float(image.min()) and float(image.max()) <= 1.0
    (encoded,) = vae_encode(image, vae)
    assert encoded["samples"].shape == (1, 128, 4, 4)
    # SamplerCustom with Flux2Scheduler's sigmas
    (sigmas,) = f2.flux2_scheduler(2, 16, 16)
    (sampler,) = ksampler_select("euler")
    custom = sampler_custom(model, True, 7, 4.0, positive, negative, sampler, sigmas, latent)
    assert custom[0]["samples"].shape == (1, 128, 4, 4) and torch.isfinite(custom[0]["samples"]).all()


def test_flux_kv_cache_node_on_a_klein_edit(env, caplog):
    """FluxKVCache (today's ComfyUI, experimental): the template's edit graph (ReferenceLatent on both
    conditionings, CFG 1); one step is the filling call alone, so it equals the uncached model with
    "index_timestep_zero" references; the input MODEL is left as it was."""
    from types import SimpleNamespace

    from nodes.flux_nodes import flux_kontext_multi_reference_latent_method, reference_latent

    (model,) = unet_loader("flux2_klein_tiny.safetensors", "default")
    (clip,) = clip_loader("qwen_3_4b.safetensors", "flux2")
    (positive,) = clip_text_encode("make the fox blue", clip)
    (negative,) = clip_text_encode("", clip)
    ref = {"samples": torch.randn(1, 128, 3, 2, generator=torch.Generator().manual_seed(4))}
    (positive,) = reference_latent(positive, ref)
    (negative,) = reference_latent(negative, ref)
    latent = {"samples": torch.zeros(1, 128, 4, 4)}
    (kv,) = f2.flux_kv_cache(model)
    assert kv is not model and "diffusion_model.default_ref_method" not in model.object_patches
    (one,) = ksampler(kv, 7, 1, 1.0, "euler", "simple", positive, negative, latent)
    (pos0,) = flux_kontext_multi_reference_latent_method(positive, "index_timestep_zero")
    (neg0,) = flux_kontext_multi_reference_latent_method(negative, "index_timestep_zero")
    (plain,) = ksampler(model, 7, 1, 1.0, "euler", "simple", pos0, neg0, latent)
    assert torch.equal(one["samples"], plain["samples"])
    with caplog.at_level(logging.INFO, logger="comfy_core.model_patches.flux_kv_cache"):
        (three,) = ksampler(kv, 7, 3, 1.0, "euler", "simple", positive, negative, latent)
        # the template's path: CFGGuider + SamplerCustomAdvanced with Flux2Scheduler's sigmas
        from nodes.custom_sampling import cfg_guider_node, random_noise, sampler_custom_advanced

        (guider,) = cfg_guider_node(kv, positive, negative, 1.0)
        (noise,) = random_noise(7)
        (sigmas,) = f2.flux2_scheduler(4, 16, 16)
        advanced = sampler_custom_advanced(noise, guider, ksampler_select("euler")[0], sigmas, latent)
    assert three["samples"].shape == (1, 128, 4, 4) and torch.isfinite(three["samples"]).all()
    assert torch.isfinite(advanced[0]["samples"]).all()
    counts = [r.getMessage() for r in caplog.records if r.getMessage().startswith("FluxKVCache")]
    assert counts == ["FluxKVCache - 1 filling calls, 2 cached calls", "FluxKVCache - 1 filling calls, 3 cached calls"]
    with pytest.raises(NodeInputError, match="does not run a reference K/V cache"):
        f2.flux_kv_cache(SimpleNamespace(model=SimpleNamespace(diffusion_model=torch.nn.Linear(1, 1)),
                                         model_options={}))


def _pictures():
    gen = torch.Generator().manual_seed(8)
    return torch.rand(1, 16, 24, 3, generator=gen), torch.rand(2, 8, 8, 4, generator=gen)


def test_reference_multi_latent_encodes_each_image_onto_both_conditionings(env):
    (vae,) = vae_loader("flux2_vae_tiny.safetensors")
    first, second = _pictures()
    existing = torch.zeros(1, 128, 1, 1)
    positive = [[torch.ones(1, 3, 96), {"reference_latents": [existing]}]]
    negative = [[torch.zeros(1, 3, 96), {}]]
    pos, neg, empty = f2.reference_multi_latent(positive, negative, vae, {"resolution": "keep resolution"},
                                                {"image1": second, "image0": first})
    want = [vae.encode(first), vae.encode(second[:, :, :, :3])]  # slot order, alpha dropped
    got = pos[0][1]["reference_latents"]
    assert len(got) == 3 and got[0] is existing  # appended: chained nodes accumulate references
    assert all(torch.equal(g, w) for g, w in zip(got[1:], want))
    assert [r.shape for r in neg[0][1]["reference_latents"]] == [w.shape for w in want]
    assert "reference_latents" not in negative[0][1] and len(positive[0][1]["reference_latents"]) == 1  # inputs kept
    assert empty["samples"].shape == want[0].shape and not empty["samples"].any()
    # no negative: the negative output is the modified positive
    pos, neg, _ = f2.reference_multi_latent(positive, None, vae, {"resolution": "keep resolution"}, {"image0": first})
    assert neg is pos


def test_reference_multi_latent_resizes_to_megapixels(env):
    (vae,) = vae_loader("flux2_vae_tiny.safetensors")
    first, _ = _pictures()
    pos, _, empty = f2.reference_multi_latent([[torch.ones(1, 3, 96), {}]], None, vae,
                                              {"resolution": "resize", "megapixels": 0.01}, {"image0": first})
    scale = math.sqrt(int(0.01 * 1024 * 1024) / (24 * 16))  # ImageScaleToTotalPixels' rule: 125 x 84 pixels
    resized = f2._to_megapixels(first, 0.01)
    assert resized.shape[1:3] == (round(16 * scale), round(24 * scale))
    assert torch.equal(pos[0][1]["reference_latents"][0], vae.encode(resized))
    assert empty["samples"].shape == pos[0][1]["reference_latents"][0].shape


def test_reference_multi_latent_without_images_or_vae():
    positive = [[torch.ones(1, 3, 96), {}]]
    pos, neg, empty = f2.reference_multi_latent(positive, None, None, {"resolution": "keep resolution"}, {})
    assert pos is positive and neg is positive
    assert empty["samples"].shape == (1, 128, 64, 64) and empty["downscale_ratio_spacial"] == 16
    _, _, small = f2.reference_multi_latent(positive, None, None, {"resolution": "resize", "megapixels": 0.25}, {})
    assert small["samples"].shape == (1, 128, 32, 32)
    with pytest.raises(NodeInputError, match="vae"):
        f2.reference_multi_latent(positive, None, None, {"resolution": "keep resolution"},
                                  {"image0": torch.rand(1, 8, 8, 3)})
    with pytest.raises(NodeInputError, match="resolution"):
        f2.reference_multi_latent(positive, None, None, {"resolution": "stretch"}, {})
