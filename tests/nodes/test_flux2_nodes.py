"""EmptyFlux2LatentImage and Flux2Scheduler (today's ComfyUI, comfy_extras/nodes_flux.py), and a
FLUX.2 Klein workflow on tiny files: UNETLoader + CLIPLoader type "flux2" + VAELoader, a 2-step
KSampler and SamplerCustom with Flux2Scheduler, VAEDecode / VAEEncode."""
from __future__ import annotations

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
