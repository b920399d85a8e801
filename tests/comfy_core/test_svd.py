"""Stable Video Diffusion: family detection from names and shapes, loading into the video UNet and
temporal VAE, numerics against diffusers' UNetSpatioTemporalConditionModel and TemporalDecoder on
the same tiny weights, and the conditioning the model builds (ADM, concatenated latent, frames)."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.errors import UnknownFamilyError
from comfy_core.loading import load_checkpoint
from comfy_core.models.unet import UNetConfig
from comfy_core.models.video_blocks import AlphaBlender
from comfy_core.families.svd.video_diffusion import VideoDiffusionModel
from comfy_core.families.svd.video_unet import VideoUNetModel
from comfy_core.models.video_vae import VideoAutoencoder, video_vae_config
from comfy_core.models.model_sampling import ContinuousEDMModelSampling
from tests.fixtures.svd import UNET, svd_unet_shapes, tiny_svd_state_dict, write_tiny_svd_checkpoint
from tests.fixtures.svd_oracle import diffusers_temporal_decoder, diffusers_unet


class _Shape:
    def __init__(self, shape):
        self.shape = shape


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return tiny_svd_state_dict()


@pytest.fixture(scope="module")
def svd_path(tmp_path_factory):
    return write_tiny_svd_checkpoint(tmp_path_factory.mktemp("svd"))


@pytest.fixture(scope="module")
def loaded(svd_path):
    return load_checkpoint(svd_path, output_clip=False)


@pytest.fixture(scope="module")
def ours(state) -> VideoUNetModel:
    """Our video UNet on the tiny weights, built once: every test here only calls it."""
    return _ours_unet(state)


@pytest.fixture(scope="module")
def theirs(state):
    """diffusers' UNetSpatioTemporalConditionModel on the same weights, built once."""
    return diffusers_unet(state)


def _ours_unet(state) -> VideoUNetModel:
    config = dataclasses.replace(UNetConfig.detect_from_weights(state), num_heads=-1, num_head_channels=64)
    unet = VideoUNetModel(config)
    prefix = "model.diffusion_model."
    unet.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}, strict=True)
    return unet.eval()


def _embedding(values: list[float]) -> torch.Tensor:
    """Timestep(256) of each value, concatenated (cos half first), computed here."""
    freqs = torch.exp(-math.log(10000.0) * torch.arange(128, dtype=torch.float32) / 128)
    rows = [torch.cat([torch.cos(v * freqs), torch.sin(v * freqs)]) for v in values]
    return torch.cat(rows)


def test_svd_is_detected_from_names_and_shapes(state):
    header = {k: _Shape(tuple(v.shape)) for k, v in state.items()}
    detection = default_registry().detect(header)
    assert detection.family.name == "svd"
    assert detection.unet_config.in_channels == 8 and detection.unet_config.adm_in_channels == 768


def test_without_temporal_layers_or_image_encoder_it_is_not_svd(state):
    no_time = {k: _Shape(tuple(v.shape)) for k, v in state.items() if ".time_stack." not in k}
    no_vision = {k: _Shape(tuple(v.shape)) for k, v in state.items() if not k.startswith("conditioner.embedders.0.")}
    for header in (no_time, no_vision):
        with pytest.raises(UnknownFamilyError):
            default_registry().detect(header)


def test_a_lone_svd_unet_is_told_apart_from_sdxl_instruct_pix2pix():
    header = {k: _Shape(v) for k, v in svd_unet_shapes().items()}
    assert default_registry().detect_diffusion_model(header).family.name == "svd"


def test_loading_builds_the_video_modules_and_edm_v_sampling(loaded):
    model, clip, vae = loaded
    assert clip is None
    dm = model.model
    assert isinstance(dm, VideoDiffusionModel) and isinstance(dm.diffusion_model, VideoUNetModel)
    assert isinstance(vae.model, VideoAutoencoder)
    sampling = dm.model_sampling
    assert isinstance(sampling, ContinuousEDMModelSampling) and sampling.prediction == "v"
    assert math.isclose(float(sampling.sigma_min), 0.002, rel_tol=1e-5)
    assert math.isclose(float(sampling.sigma_max), 700.0, rel_tol=1e-5)
    assert sampling.sigma_data == 1.0
    assert math.isclose(float(sampling.timestep(torch.tensor(2.0))), 0.25 * math.log(2.0), rel_tol=1e-6)
    assert dm.latent_format.scale_factor == pytest.approx(0.18215)


@pytest.mark.parametrize("videos", [1, 2])
def test_video_unet_matches_diffusers(ours, theirs, videos):
    g = torch.Generator().manual_seed(1)
    frames = 3
    x = torch.randn(videos, frames, 8, 8, 8, generator=g)
    context = torch.randn(videos, 1, UNET.context_dim, generator=g)
    t = torch.tensor([0.3, -0.5])[:videos]
    ids = torch.tensor([[5.0, 127.0, 0.0], [2.0, 30.0, 0.5]])[:videos]
    y = torch.stack([_embedding(row.tolist()) for row in ids]).repeat_interleave(frames, 0)
    with torch.no_grad():
        got = ours(x.flatten(0, 1), t.repeat_interleave(frames), context.repeat_interleave(frames, 0), y,
                   num_video_frames=frames)
        want = theirs(x, t, context, ids).sample.flatten(0, 1)
    assert want.abs().mean() > 0.1
    torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)


def test_frames_interact_only_within_a_video(ours):
    """Two videos in one batch give what each gives alone; changing one frame changes the others."""
    unet = ours
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 8, 8, 8, generator=g)
    context = torch.randn(6, 1, UNET.context_dim, generator=g)
    y = _embedding([5.0, 127.0, 0.0]).repeat(6, 1)
    t = torch.full((6,), 0.2)
    with torch.no_grad():
        both = unet(x, t, context, y, num_video_frames=3)
        first = unet(x[:3], t[:3], context[:3], y[:3], num_video_frames=3)
        changed = x.clone()
        changed[0] += 1.0
        moved = unet(changed[:3], t[:3], context[:3], y[:3], num_video_frames=3)
    torch.testing.assert_close(both[:3], first, atol=1e-5, rtol=1e-5)
    assert (moved[2] - first[2]).abs().max() > 1e-3  # frame 0 reaches frame 2 through the time layers


def test_temporal_decoder_matches_diffusers(state):
    vae = VideoAutoencoder(video_vae_config(state))
    prefix = "first_stage_model."
    vae.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}, strict=True)
    decoder = diffusers_temporal_decoder(state)
    z = torch.randn(4, 4, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = vae.eval().decode_raw(z)
        want = decoder(z, torch.zeros(1, 4), num_frames=4)
    assert want.abs().mean() > 0.05
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_alpha_blender_strategies():
    spatial, temporal = torch.full((4, 2, 3), 2.0), torch.full((4, 2, 3), -1.0)
    learned = AlphaBlender(0.5, "learned")
    a = torch.sigmoid(torch.tensor(0.5))
    torch.testing.assert_close(learned(spatial, temporal), a * spatial + (1 - a) * temporal)
    fixed = AlphaBlender(0.25, "fixed")
    assert "mix_factor" in dict(fixed.named_buffers())
    torch.testing.assert_close(fixed(spatial, temporal), 0.25 * spatial + 0.75 * temporal)
    with_images = AlphaBlender(0.0, "learned_with_images")
    indicator = torch.tensor([[1.0, 0.0], [0.0, 0.0]])  # 2 videos x 2 frames: frame 0 of video 0 is an image
    out = with_images(spatial, temporal, indicator)
    torch.testing.assert_close(out[0], spatial[0])
    torch.testing.assert_close(out[1:], 0.5 * spatial[1:] + 0.5 * temporal[1:])
    with pytest.raises(ValueError):
        AlphaBlender(0.0, "sometimes")


def test_adm_is_fps_minus_one_motion_and_augmentation(loaded):
    dm = loaded[0].model
    torch.testing.assert_close(dm.encode_adm(fps=8, motion_bucket_id=40, augmentation_level=0.25)[0],
                               _embedding([7.0, 40.0, 0.25]))
    torch.testing.assert_close(dm.encode_adm()[0], _embedding([5.0, 127.0, 0.0]))  # ComfyUI's defaults


def test_concat_cond_is_the_unscaled_latent_for_every_frame(loaded):
    dm = loaded[0].model
    noise = torch.zeros(5, 4, 8, 8)
    latent = torch.randn(1, 4, 8, 8)
    torch.testing.assert_close(dm.concat_cond(noise=noise, concat_latent_image=latent), latent.repeat(5, 1, 1, 1))
    assert torch.equal(dm.concat_cond(noise=noise), torch.zeros(5, 4, 8, 8))
    wide = torch.randn(1, 4, 8, 16)  # resized bilinearly after a centre crop to the noise's aspect
    want = torch.nn.functional.interpolate(wide[:, :, :, 4:12], size=(8, 8), mode="bilinear")
    torch.testing.assert_close(dm.concat_cond(noise=noise, concat_latent_image=wide)[0], want[0])


def test_frames_per_video_come_from_the_batched_entries():
    x = torch.zeros(6, 4, 2, 2)
    assert VideoDiffusionModel.video_frames(x, None, {"cond_or_uncond": [1, 0]}) == 3
    assert VideoDiffusionModel.video_frames(x, None, None) == 6
    assert VideoDiffusionModel.video_frames(x, torch.tensor([2, 2]), {"cond_or_uncond": [0]}) == 2
