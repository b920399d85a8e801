"""The VOID video-inpainting nodes (nodes/void_nodes.py) as ComfyUI's comfy_extras/nodes_void.py
runs them: the optical flow loader, the quadmask levels, the length rule, the 32-channel inpaint
conditioning through the CogVideoX VAE, the warped noise from RAFT, its NOISE and a VOIDSampler run
of a tiny VOID network through SamplerCustomAdvanced."""
from __future__ import annotations

import pytest
import torch

from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.void_nodes import (LatentNoise, _model_files, optical_flow_loader, valid_void_length,
                              void_inpaint_conditioning, void_quadmask_preprocess, void_sampler, void_warped_noise,
                              void_warped_noise_source)
from tests.fixtures.template_models_void import tiny_cogvideox_state_dict, tiny_cogvideox_vae_state_dict
from tests.nodes.node_context import running_node

pytest.importorskip("torchvision")


def _save(state: dict, path):
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Environment:
    from torchvision.models.optical_flow import raft_small

    root = tmp_path_factory.mktemp("void")
    environment = Environment.rooted_at(root / "base")
    environment.ensure_dirs()
    folder = root / "base" / "models" / "optical_flow"
    torch.manual_seed(0)
    _save(raft_small(weights=None).state_dict(), folder / "raft_small.safetensors")
    _save({"model.weight": torch.zeros(2)}, folder / "other.safetensors")
    return environment


@pytest.fixture(scope="module")
def vae(tmp_path_factory):
    from comfy_core.loading import load_vae

    path = tmp_path_factory.mktemp("vae") / "cogvideox_vae.safetensors"
    return load_vae(_save(tiny_cogvideox_vae_state_dict(seed=2), path))


def test_loader_lists_the_folder_and_refuses_other_files(env):
    from comfy_core.models.optical_flow import OpticalFlowModel

    assert set(_model_files(env)) == {"raft_small.safetensors", "other.safetensors"}
    with running_node("OpticalFlowLoader", env=env):
        model = optical_flow_loader("raft_small.safetensors")[0]
        assert isinstance(model, OpticalFlowModel) and model.kind == "raft_small"
        with pytest.raises(NodeInputError, match="feature_encoder"):
            optical_flow_loader("other.safetensors")


def test_quadmask_has_four_levels_and_dilates_the_removed_region():
    values = torch.tensor([0.0, 20.0, 40.0, 90.0, 100.0, 180.0, 200.0, 255.0]) / 255.0
    (out,) = void_quadmask_preprocess(values.view(1, 1, 8), 0)
    expected = (255.0 - torch.tensor([0.0, 0.0, 63.0, 63.0, 127.0, 127.0, 255.0, 255.0])) / 255.0
    torch.testing.assert_close(out[0, 0], expected)
    mask = torch.ones(1, 7, 7)
    mask[0, 3, 3] = 0.0
    (grown,) = void_quadmask_preprocess(mask, 1)
    assert grown[0, 2:5, 2:5].eq(1.0).all() and grown[0, 0].eq(0.0).all()
    assert void_quadmask_preprocess(mask * 255.0, 0)[0][0, 3, 3] == 1.0  # 0..255 masks are taken too


def test_lengths_round_down_to_an_even_latent_length():
    assert [valid_void_length(n) for n in (49, 45, 41, 5, 1)] == [45, 45, 37, 5, 5]


def test_inpaint_conditioning_encodes_mask_and_masked_video(vae):
    gen = torch.Generator().manual_seed(3)
    video = torch.rand(12, 20, 30, 3, generator=gen)
    mask = torch.zeros(12, 20, 30)
    mask[:, 4:12, 8:20] = 1.0
    positive = [[torch.zeros(1, 226, 64), {}]]
    negative = [[torch.ones(1, 226, 64), {"x": 1}]]
    pos, neg, latent = void_inpaint_conditioning(positive, negative, vae, video, mask, 24, 16, 11, 2)
    # length 11 -> 3 latent frames, odd -> 2 (5 frames)
    assert latent["samples"].shape == (2, 16, 2, 2, 3) and not latent["samples"].any()
    inpaint = pos[0][1]["concat_latent_image"]
    assert inpaint.shape == (1, 32, 2, 2, 3) and neg[0][1]["concat_latent_image"] is inpaint
    assert neg[0][1]["x"] == 1 and positive[0][1] == {}
    from comfy_core.image.resize import upscale_samples

    frames = upscale_samples(video[:5].movedim(-1, 1), 24, 16, "bilinear", "center").movedim(1, -1)
    small = upscale_samples(mask[:5, None], 24, 16, "bilinear", "center").movedim(1, -1).expand(-1, -1, -1, 3)
    torch.testing.assert_close(inpaint[:, :16], vae.encode(1.0 - small))
    torch.testing.assert_close(inpaint[:, 16:], vae.encode(frames * (1.0 - small)))


def test_warped_noise_from_raft_is_shaped_as_the_latent(env):
    with running_node("OpticalFlowLoader", env=env):
        flow = optical_flow_loader("raft_small.safetensors")[0]
    video = torch.rand(7, 256, 256, 3, generator=torch.Generator().manual_seed(4))
    with running_node("VOIDWarpedNoise", env=env):
        (noise,) = void_warped_noise(flow, video, 256, 256, 7, 2)
        samples = noise["samples"]
        assert samples.shape == (2, 16, 2, 32, 32)  # 7 frames -> 5 (an even latent length of 2)
        assert torch.equal(samples[0], samples[1]) and samples.std().item() == pytest.approx(1.0, abs=0.2)
        with pytest.raises(NodeInputError, match="optical_flow"):
            void_warped_noise("raft", video, 256, 256, 7, 1)
        with pytest.raises(NodeInputError, match="256"):
            void_warped_noise(flow, video[:, :128, :128], 128, 128, 7, 1)


def test_warped_noise_source_gives_the_latent_as_noise():
    samples = torch.randn(1, 16, 2, 4, 4)
    (noise,) = void_warped_noise_source({"samples": samples})
    assert isinstance(noise, LatentNoise) and noise.seed == 0
    out = noise.generate_noise({"samples": torch.zeros(1)})
    assert torch.equal(out, samples) and out is not samples


def test_void_sampler_runs_a_tiny_void_pass_through_sampler_custom_advanced(tmp_path, vae):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from nodes.custom_sampling import cfg_guider_node, random_noise, sampler_custom_advanced
    from nodes.scheduler_nodes import basic_scheduler

    model = load_diffusion_model(_save(tiny_cogvideox_state_dict(seed=6), tmp_path / "void_pass1.safetensors"))
    gen = torch.Generator().manual_seed(5)
    video, mask = torch.rand(5, 32, 48, 3, generator=gen), torch.zeros(5, 32, 48)
    mask[:, 8:24, 16:32] = 1.0
    pos, neg, latent = void_inpaint_conditioning([[torch.randn(1, 226, 64, generator=gen), {}]],
                                                 [[torch.randn(1, 226, 64, generator=gen), {}]],
                                                 vae, video, mask, 48, 32, 5, 1)
    (guider,) = cfg_guider_node(model, pos, neg, 6.0)
    (sigmas,) = basic_scheduler(model, "simple", 3, 1.0)
    assert float(sigmas[0]) == pytest.approx(4518.6, rel=1e-3)
    (sampler,) = void_sampler()
    from comfy_core.sampling.guider import Sampler

    assert isinstance(sampler, Sampler) and type(sampler) is type(void_sampler()[0])
    out, _ = sampler_custom_advanced(random_noise(43)[0], guider, sampler, sigmas, latent)
    assert out["samples"].shape == (1, 16, 2, 4, 6) and torch.isfinite(out["samples"]).all()
    warped = {"samples": torch.randn(1, 16, 2, 4, 6, generator=gen)}
    again, _ = sampler_custom_advanced(void_warped_noise_source(warped)[0], guider, sampler, sigmas, latent)
    assert torch.isfinite(again["samples"]).all() and not torch.equal(again["samples"], out["samples"])
