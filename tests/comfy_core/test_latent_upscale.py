"""LTX's latent upsampler (comfy_core/upscale/ltx_latent_upsampler.py) against diffusers'
`LTXLatentUpsamplerModel` / `LTX2LatentUpsamplerModel` on tiny random weights, its configuration
read from names, shapes and metadata, and the latent-upscale-model registry's loading and
refusals (comfy_core/upscale/latent_models.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from comfy_core.upscale.latent_models import (
    KINDS, LatentUpscaleModel, LatentUpscaleModelError, kind_of, load_latent_upscale_model, model_from_state_dict,
    upsample_normalized)
from comfy_core.upscale.ltx_latent_upsampler import LatentUpsamplerConfigError, LTXLatentUpsamplerConfig
from tests.fixtures import latent_upscale_files as fx

# (kind, dims, scale): every variant the released files are, and the rational scales.
VARIANTS = [("spatial_x2", 3, 2.0), ("spatial_x2", 2, 2.0), ("rational", 3, 2.0), ("rational", 3, 1.5),
            ("temporal_x2", 3, 2.0), ("spatiotemporal_x2", 3, 2.0)]


@pytest.mark.parametrize("kind,dims,scale", VARIANTS)
def test_matches_diffusers(tmp_path: Path, kind: str, dims: int, scale: float):
    path = fx.write_tiny_latent_upsampler(tmp_path / "up.safetensors", kind, dims=dims, scale=scale, seed=3)
    ours = load_latent_upscale_model(path)
    reference = fx.diffusers_latent_upsampler(
        kind, fx.tiny_latent_upsampler_state_dict(kind, dims=dims, scale=scale, seed=3), dims=dims, scale=scale)
    latent = torch.randn(2, fx.LATENT_CHANNELS, 3, 4, 6, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = reference(latent)
    got = ours.upsample(latent)
    frames, side = ours.config.factors
    assert got.shape == want.shape == (2, fx.LATENT_CHANNELS, int(frames * 2) + 1, int(4 * side), int(6 * side))
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


def test_configuration_from_names_and_shapes_matches_the_metadata(tmp_path: Path):
    for kind in fx.KINDS:
        stated = fx.tiny_latent_upsampler_config(kind)
        state = fx.tiny_latent_upsampler_state_dict(kind)
        expected = LTXLatentUpsamplerConfig(**{k: v for k, v in stated.items() if not k.startswith("_")})
        assert LTXLatentUpsamplerConfig.detect(state, {"config": json.dumps(stated)}) == expected
        assert LTXLatentUpsamplerConfig.detect(state) == expected  # no metadata: a diffusers-converted file
    # x1.5 and x0.75 share a pixel shuffle of 3: only the metadata's scale tells them apart
    state = fx.tiny_latent_upsampler_state_dict("rational", scale=0.75)
    config = json.dumps(fx.tiny_latent_upsampler_config("rational", scale=0.75))
    assert LTXLatentUpsamplerConfig.detect(state, {"config": config}).factors == (1.0, 0.75)
    with pytest.raises(LatentUpsamplerConfigError, match="scale 0.75 or 1.5; the file has no config"):
        LTXLatentUpsamplerConfig.detect(state)
    path = fx.write_tiny_latent_upsampler(tmp_path / "big.safetensors", "rational", blocks=2, mid_channels=64)
    model = load_latent_upscale_model(path)
    assert (model.config.num_blocks_per_stage, model.config.mid_channels, model.kind.name) == (2, 64, "ltx")


def test_metadata_that_contradicts_the_weights_is_refused():
    state = fx.tiny_latent_upsampler_state_dict("spatial_x2")
    for change in ({"mid_channels": 64}, {"temporal_upsample": True}, {"rational_resampler": True},
                   {"num_blocks_per_stage": 4}, {"dims": 2}):
        config = {**fx.tiny_latent_upsampler_config("spatial_x2"), **change}
        with pytest.raises(LatentUpsamplerConfigError, match=next(iter(change))):
            LTXLatentUpsamplerConfig.detect(state, {"config": json.dumps(config)})
    rational = fx.tiny_latent_upsampler_state_dict("rational")
    with pytest.raises(LatentUpsamplerConfigError, match="spatial_scale 4"):
        LTXLatentUpsamplerConfig.detect(rational, {"config": json.dumps({"spatial_scale": 4.0})})
    with pytest.raises(LatentUpsamplerConfigError, match="not JSON"):
        LTXLatentUpsamplerConfig.detect(rational, {"config": "{oops"})


def test_weights_that_do_not_fit_are_refused_with_typed_errors():
    def refused(state, match):
        with pytest.raises(LatentUpscaleModelError, match=match):
            model_from_state_dict(state, name="up.safetensors")

    state = fx.tiny_latent_upsampler_state_dict("rational")
    refused({k: v for k, v in state.items() if k != "final_conv.bias"}, r"up\.safetensors: .*missing \['final_conv.bias'\]")
    refused({**state, "extra.weight": torch.zeros(1)}, r"unexpected \['extra.weight'\]")
    refused({**state, "upsampler.conv.weight": torch.zeros(5 * 32, 32, 3, 3)}, "not a pixel shuffle")
    refused({**state, "final_conv.bias": torch.zeros(7)}, r"final_conv.bias has shape \(7,\)")
    refused({k: v for k, v in state.items() if not k.startswith("post_upsample_res_blocks.0.conv1")},
            "1 residual blocks before the upsampler but 0 after")
    refused(fx.tiny_latent_upsampler_state_dict("spatial_x2", mid_channels=16), "16 is not a positive multiple of the 32")
    refused({"decoder.conv_in.weight": torch.zeros(1)}, "not a latent upscale model; expected one of: HunyuanVideo")


def test_the_registry_names_the_hunyuanvideo_15_files():
    assert [kind.name for kind in KINDS] == ["hunyuanvideo15_sr_720p", "hunyuanvideo15_upsampler_1080p", "ltx"]
    assert kind_of(["up.0.block.0.conv1.conv.weight", "conv_in.conv.weight"]).name == "hunyuanvideo15_upsampler_1080p"
    assert kind_of(["blocks.0.block.0.conv.weight"]).name == "hunyuanvideo15_sr_720p"
    assert kind_of(["something"]) is None
    # built by comfy_core.upscale.hv15_latent_upsampler.py (tests/comfy_core/test_hunyuan_video15_upscale.py)
    with pytest.raises(LatentUpscaleModelError, match="HunyuanVideo 1.5 1080p latent upsampler: 'conv_in.conv.weight'"):
        model_from_state_dict({"up.0.block.0.conv1.conv.weight": torch.zeros(1)}, name="hv15_1080p.safetensors")


def test_unreadable_files_are_refused(tmp_path: Path):
    bad = tmp_path / "broken.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(LatentUpscaleModelError, match="broken.safetensors: not a readable weight file"):
        load_latent_upscale_model(bad)


class _Statistics(torch.nn.Module):
    """An LTX VAE's `per_channel_statistics` (x * std + mean and its inverse)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(5)
        self.register_buffer("mean-of-means", 0.3 * torch.randn(channels, generator=generator))
        self.register_buffer("std-of-means", 0.5 + torch.rand(channels, generator=generator))

    def _buffers_as(self, x):
        view = (1, -1, 1, 1, 1)
        return self.get_buffer("mean-of-means").view(view).to(x), self.get_buffer("std-of-means").view(view).to(x)

    def un_normalize(self, x):
        mean, std = self._buffers_as(x)
        return x * std + mean

    def normalize(self, x):
        mean, std = self._buffers_as(x)
        return (x - mean) / std


def test_upsample_normalized_unnormalises_runs_and_renormalises_in_the_model_dtype():
    state = fx.tiny_latent_upsampler_state_dict("rational")
    statistics = _Statistics(fx.LATENT_CHANNELS)
    latent = torch.randn(1, fx.LATENT_CHANNELS, 2, 3, 3, generator=torch.Generator().manual_seed(2))
    model = model_from_state_dict(state, dtype=torch.float32)
    got = upsample_normalized(model, latent, statistics)
    with torch.no_grad():
        want = statistics.normalize(model.model(statistics.un_normalize(latent)))
    torch.testing.assert_close(got, want)
    plain = model.upsample(latent)
    assert not torch.allclose(got, plain, atol=1e-3)  # the statistics matter
    assert torch.equal(model.resample_latent(latent), plain)  # ComfyUI's name for the plain run
    half = model_from_state_dict(state, dtype=torch.bfloat16)
    assert isinstance(half, LatentUpscaleModel) and half.model_dtype() == torch.bfloat16
    out = upsample_normalized(half, latent, statistics)
    assert out.dtype == torch.float32 and out.device.type == "cpu"
    torch.testing.assert_close(out, want, atol=0.1, rtol=0.05)
    with pytest.raises(LatentUpscaleModelError, match=r"takes a video latent \[B, 128, F, H, W\]"):
        upsample_normalized(model, latent[:, :16], statistics)
    with pytest.raises(LatentUpscaleModelError, match="statistics have 16 channels"):
        upsample_normalized(model, latent, _Statistics(16))
