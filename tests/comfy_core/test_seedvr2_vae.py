"""SeedVR2's causal video VAE (comfy_core/models/seedvr2_vae.py) against equations written here:
the causal padding (the first frame repeated in front), per-frame group norms, the MAGViT-style
up-sampler's cell layout, one-head frame attention, the 4n + 1 <-> n + 1 frame counts, the 0.9152
scaling, causality (later frames never change earlier latents), and VAELoader's detection."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.fixtures.template_models_seedvr2 import (WRITERS_SEEDVR2, tiny_seedvr2_vae_config,
                                                    tiny_seedvr2_vae_state_dict)


@pytest.fixture(scope="module")
def vae():
    from comfy_core.models.seedvr2_vae import SeedVR2VAE

    module = SeedVR2VAE(tiny_seedvr2_vae_config())
    module.load_state_dict(tiny_seedvr2_vae_state_dict(seed=2))
    return module.eval()


def test_the_causal_convolution_repeats_the_first_frame_in_front():
    from comfy_core.models.seedvr2_vae import CausalConv3d

    torch.manual_seed(0)
    conv = CausalConv3d(3, 4, 3, padding=1)
    x = torch.randn(1, 3, 5, 6, 7)
    padded = torch.cat((x[:, :, :1], x[:, :, :1], x), dim=2)
    want = F.conv3d(F.pad(padded, (1, 1, 1, 1)), conv.weight, conv.bias)
    torch.testing.assert_close(conv(x), want)
    strided = CausalConv3d(3, 4, (3, 3, 3), stride=(2, 2, 2), padding=(1, 0, 0))
    got = strided(x)
    want = F.conv3d(padded, strided.weight, strided.bias, stride=2)
    torch.testing.assert_close(got, want)
    assert got.shape[2] == 3  # 5 frames -> 3


def test_group_norms_see_one_frame_at_a_time():
    from comfy_core.models.seedvr2_vae import frame_group_norm

    norm = torch.nn.GroupNorm(32, 64, eps=1e-6)
    x = torch.randn(1, 64, 3, 4, 4)
    y = x.clone()
    y[:, :, 2] *= 10.0
    torch.testing.assert_close(frame_group_norm(norm, x)[:, :, :2], frame_group_norm(norm, y)[:, :, :2])
    per_frame = torch.stack([F.group_norm(x[:, :, t], 32, eps=1e-6) for t in range(3)], dim=2)
    torch.testing.assert_close(frame_group_norm(norm, x), per_frame)


@pytest.mark.parametrize("temporal", [False, True])
def test_the_upsampler_lays_channel_blocks_out_as_x_y_z_cells(temporal):
    from comfy_core.models.seedvr2_vae import Upsample3D

    torch.manual_seed(1)
    up = Upsample3D(32, temporal)
    x = torch.randn(1, 32, 2, 3, 4)
    z = 2 if temporal else 1
    u = F.conv3d(x, up.upscale_conv.weight, up.upscale_conv.bias)  # [1, 32 * 4 * z, 2, 3, 4]
    cells = torch.empty(1, 32, 2 * z, 6, 8)
    for xi in range(2):
        for yi in range(2):
            for zi in range(z):
                block = u[:, ((xi * 2 + yi) * z + zi) * 32:((xi * 2 + yi) * z + zi + 1) * 32]
                cells[:, :, zi::z, xi::2, yi::2] = block
    if temporal:
        cells = torch.cat((cells[:, :, :1], cells[:, :, 2:]), dim=2)  # frame 0 stands for one frame
    want = up.conv(cells)
    torch.testing.assert_close(up(x), want)


def test_the_frame_attention_is_one_head_softmax_over_each_frame():
    from comfy_core.models.seedvr2_vae import FrameAttention

    torch.manual_seed(2)
    attn = FrameAttention(32)
    x = torch.randn(1, 32, 2, 3, 3)
    out = attn(x)
    for t in range(2):
        frame = x[0, :, t].reshape(32, 9)
        h = F.group_norm(frame[None], 32, attn.group_norm.weight, attn.group_norm.bias, 1e-6)[0].T  # [9, 32]
        q, k, v = attn.to_q(h), attn.to_k(h), attn.to_v(h)
        o = torch.softmax(q @ k.T / math.sqrt(32), dim=-1) @ v
        want = frame + attn.to_out[0](o).T
        torch.testing.assert_close(out[0, :, t].reshape(32, 9), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("frames, latent_frames", [(1, 1), (5, 2), (9, 3)])
def test_frame_counts_and_sizes(vae, frames, latent_frames):
    x = torch.rand(1, 3, frames, 16, 24) * 2 - 1
    with torch.no_grad():
        z = vae.encode_raw(x)
        y = vae.decode_raw(z)
    assert z.shape == (1, 16, latent_frames, 2, 3)
    assert y.shape == (1, 3, frames, 16, 24)


def test_the_latent_is_the_posterior_mean_scaled_by_0_9152(vae):
    x = torch.rand(1, 3, 5, 16, 16) * 2 - 1
    with torch.no_grad():
        moments = vae.encoder(x)
        z = vae.encode_raw(x)
        torch.testing.assert_close(z, moments[:, :16] * 0.9152)
        torch.testing.assert_close(vae.decode_raw(z), vae.decoder(z / 0.9152))


def test_encoding_and_decoding_are_causal(vae):
    torch.manual_seed(3)
    x = torch.rand(1, 3, 9, 16, 16) * 2 - 1
    with torch.no_grad():
        whole = vae.encode_raw(x)
        head = vae.encode_raw(x[:, :, :5])
        first = vae.encode_raw(x[:, :, :1])
        torch.testing.assert_close(whole[:, :, :2], head, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(whole[:, :, :1], first, atol=1e-5, rtol=1e-5)
        decoded = vae.decode_raw(whole)
        torch.testing.assert_close(decoded[:, :, :5], vae.decode_raw(whole[:, :, :2]), atol=1e-5, rtol=1e-5)


def test_vaeloader_builds_it_from_comfyuis_marker(tmp_path: Path):
    from comfy_core.loading import load_vae
    from comfy_core.models.seedvr2_vae import SeedVR2VAE

    path = tmp_path / "seedvr2_ema_vae_fp16.safetensors"
    WRITERS_SEEDVR2["vae_seedvr2"](path)
    patcher = load_vae(path)
    assert isinstance(patcher.first_stage_model, SeedVR2VAE)
    assert patcher.first_stage_model.config == tiny_seedvr2_vae_config()
    assert (patcher.latent_dim, patcher.latent_channels, patcher.downscale_index_formula) == (3, 16, (4, 8, 8))
    frames = torch.rand(5, 32, 40, 3)
    latent = patcher.encode(frames)
    assert latent.shape == (1, 16, 2, 4, 5)
    images = patcher.decode(latent)
    assert images.shape == (1, 5, 32, 40, 3) and 0.0 <= float(images.min()) and float(images.max()) <= 1.0
