"""HunyuanVideo 1.5's latent upscale models (comfy_core.upscale.hv15_latent_upsampler.py) as the
latent-upscale registry builds them, and HunyuanVideo15LatentUpscaleWithModel running one."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.upscale.latent_models import LatentUpscaleModelError, model_from_state_dict
from nodes.hunyuan_video15_nodes import hunyuan_video15_latent_upscale_with_model
from tests.fixtures.hv15_files import tiny_sr_720p_state_dict, tiny_upsampler_1080p_state_dict


def _identity_tap(weight: torch.Tensor, bias: torch.Tensor, step: int = 1) -> None:
    """A causal 3x3x3 convolution that copies input channel `i * step` to output `i` (the last
    frame tap, the centre pixel)."""
    weight.zero_()
    bias.zero_()
    for i in range(weight.shape[0]):
        weight[i, i * step, 2, 1, 1] = 1.0


def test_the_1080p_upsampler_wiring():
    state = tiny_upsampler_1080p_state_dict(widths=(64, 64))
    for name in state:
        if ".block." in name and name.endswith(("conv2.conv.weight", "conv2.conv.bias")) or name.startswith("conv_in."):
            state[name].zero_()  # every residual block an identity, conv_in nothing: the latent's repeat
    _identity_tap(state["conv_out.conv.weight"], state["conv_out.conv.bias"], step=2)
    model = model_from_state_dict(state, name="hunyuanvideo15_latent_upsampler_1080p.safetensors")
    assert model.kind.name == "hunyuanvideo15_upsampler_1080p"
    assert (model.config.z_channels, model.config.block_out_channels) == (32, (64, 64))
    z = torch.randn(1, 32, 2, 3, 4, generator=torch.Generator().manual_seed(1))
    out = model.resample_latent(z)
    repeated = z.repeat_interleave(2, dim=1)
    want = F.silu(F.normalize(repeated, dim=1) * 64 ** 0.5)[:, ::2]
    assert out.shape == z.shape and torch.allclose(out, want, atol=1e-5)


def test_the_1080p_upsampler_reads_the_files_shortcut_spelling():
    model = model_from_state_dict(tiny_upsampler_1080p_state_dict(), name="up.safetensors")
    assert model.config.block_out_channels == (64, 64, 32)
    assert model.model.up[2].block[0].nin_shortcut is not None
    assert model.resample_latent(torch.zeros(1, 32, 1, 2, 2)).shape == (1, 32, 1, 2, 2)
    broken = tiny_upsampler_1080p_state_dict()
    broken["conv_out.conv.bias"] = torch.zeros(7)
    with pytest.raises(LatentUpscaleModelError, match="conv_out.conv.bias has shape"):
        model_from_state_dict(broken, name="up.safetensors")


def test_the_720p_sr_model():
    state = tiny_sr_720p_state_dict()
    for name in state:
        if name.startswith("blocks.") and ".block.4." in name:
            state[name].zero_()  # each residual block an identity
    _identity_tap(state["in_conv.conv.weight"], state["in_conv.conv.bias"])
    state["out_conv.conv.weight"].zero_()
    state["out_conv.conv.bias"].zero_()
    for i in range(16):
        state["out_conv.conv.weight"][i, i, 2, 1, 1] = 1.0
    model = model_from_state_dict(state, name="sr.safetensors")
    assert model.kind.name == "hunyuanvideo15_sr_720p" and model.config.num_blocks == 2
    z = torch.randn(1, 32, 2, 3, 3)
    out = model.resample_latent(z)
    assert torch.allclose(out[:, :16], z[:, :16], atol=1e-6) and not out[:, 16:].any()


def test_the_node_resizes_then_runs_the_model():
    model = model_from_state_dict(tiny_upsampler_1080p_state_dict(), name="up.safetensors")
    samples = {"samples": torch.randn(1, 32, 2, 2, 3)}
    (out,) = hunyuan_video15_latent_upscale_with_model(model, samples, "bilinear", 96, 64, "disabled")
    assert out["samples"].shape == (1, 32, 2, 4, 6) and out["samples"].dtype == torch.float32
