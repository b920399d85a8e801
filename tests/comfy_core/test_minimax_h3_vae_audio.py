"""MiniMax H3's audio VAE (comfy_core/families/minimax_h3/audio_vae.py) against its equations.

The reference is composed by hand from the tiny file's tensors (tests/fixtures/
minimax_h3_vae_files.py, ComfyUI's names), with the 2x upsampler written as zero-stuffing and a
convolution, the causal attention as an explicit masked softmax, the head-width pooling as a mean of
pairs (64 -> 32). Then the VAE object's layouts (ComfyUI's crop and channel rule) and the file
through VAELoader.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families.minimax_h3 import audio_vae as av
from comfy_core.patching.vae import VaePatcher
from tests.fixtures import minimax_h3_vae_files as fx


@pytest.fixture(scope="module")
def sd() -> dict[str, torch.Tensor]:
    return fx.audio_vae_state(seed=2)


@pytest.fixture(scope="module")
def model(sd):
    return av.audio_vae_from_state_dict(sd)


def _snake(x, alpha, beta):
    return x + torch.sin(alpha * x) ** 2 / (beta + 1e-9)


def _conv(x, sd, name, **kw):
    return F.conv1d(x, sd[name + ".weight"], sd.get(name + ".bias"), **kw)


def _ln(x, sd, name):
    return F.layer_norm(x, (x.shape[-1],), sd[name + ".weight"], sd[name + ".bias"], 1e-5)


def ref_encode(wave, sd):
    b, s, length = wave.shape
    x = F.pad(wave, (0, (-length) % 800)).reshape(b * s, 1, -1)
    x = _conv(x, sd, "encoder.block.0", padding=3)
    for i, stride in enumerate(fx.AUDIO_STRIDES, start=1):
        for j, d in enumerate((1, 3, 9)):
            u = f"encoder.block.{i}.block.{j}.block"
            a0, a2 = sd[u + ".0.alpha"], sd[u + ".2.alpha"]
            y = _conv(_snake(x, a0, a0), sd, u + ".1", dilation=d, padding=3 * d)
            x = x + _conv(_snake(y, a2, a2), sd, u + ".3")
        a = sd[f"encoder.block.{i}.block.3.alpha"]
        x = _conv(_snake(x, a, a), sd, f"encoder.block.{i}.block.4", stride=stride, padding=math.ceil(stride / 2))
    a = sd["encoder.block.6.alpha"]
    h = _conv(_snake(x, a, a), sd, "encoder.block.7", padding=1).transpose(1, 2)  # [N, T, 512]
    n, t, width = h.shape
    q_in = _ln(h, sd, "pre_block.norm1")
    bias = torch.cat([sd["pre_block.attn.q_bias"], torch.zeros(width), sd["pre_block.attn.v_bias"]])
    qkv = q_in @ sd["pre_block.attn.qkv.weight"].T + bias
    q, k, v = (qkv[..., i * width:(i + 1) * width].reshape(n, t, 8, 64) for i in range(3))
    scores = torch.einsum("nqhd,nkhd->nhqk", q, k) / 8.0
    scores = scores.masked_fill(torch.ones(t, t).triu(1).bool(), float("-inf"))
    heads = torch.einsum("nhqk,nkhd->nhqd", torch.softmax(scores, -1), v).mean(dim=1)  # [N, T, 64]
    pooled = heads.reshape(n, t, 32, 2).mean(-1)
    attn = pooled @ sd["pre_block.attn.proj.weight"].T + sd["pre_block.attn.proj.bias"]
    x = _ln(h, sd, "pre_block.norm3") @ sd["pre_block.proj.weight"].T + sd["pre_block.proj.bias"] + attn
    m = _ln(_ln(x, sd, "pre_block.norm2"), sd, "pre_block.mlp.norm")
    gate = F.gelu(m @ sd["pre_block.mlp.w0.weight"].T + sd["pre_block.mlp.w0.bias"], approximate="tanh")
    x = x + (gate * (m @ sd["pre_block.mlp.w1.weight"].T + sd["pre_block.mlp.w1.bias"])) @ \
        sd["pre_block.mlp.w2.weight"].T + sd["pre_block.mlp.w2.bias"]
    z = _conv(x.transpose(1, 2), sd, "mean_proj")
    z = (z - sd["latents_mean"].view(1, -1, 1)) / sd["latents_std"].view(1, -1, 1)
    return z.reshape(b, s, 32, -1).permute(0, 2, 1, 3)


def _act(x, sd, name):
    """2x up (zero-stuffed, 12-tap filter, x2), SnakeBeta, 2x down (12-tap low-pass)."""
    c, length = x.shape[1], x.shape[2]
    taps = sd[name + ".upsample.filter"]
    padded = F.pad(x, (5, 5), mode="replicate")
    stuffed = torch.zeros(x.shape[0], c, 2 * padded.shape[2] - 1)
    stuffed[..., ::2] = padded
    up = F.conv1d(stuffed, taps.flip(-1).expand(c, -1, -1), padding=11, groups=c) * 2
    up = up[..., 15:15 + 2 * length]
    y = _snake(up, sd[name + ".act.alpha"].exp().view(1, -1, 1), sd[name + ".act.beta"].exp().view(1, -1, 1))
    low = sd[name + ".downsample.lowpass.filter"]
    return F.conv1d(F.pad(y, (5, 6), mode="replicate"), low.expand(c, -1, -1), stride=2, groups=c)


def ref_decode(z, sd):
    b, _, s, t = z.shape
    outs = []
    for channel in range(s):
        x = z[:, :, channel] * sd["latents_std"].view(1, -1, 1) + sd["latents_mean"].view(1, -1, 1)
        x = _conv(_conv(x, sd, "dec_in_proj"), sd, "decoder.conv_pre", padding=3)
        for i, (rate, kernel) in enumerate(zip((5, 5, 2, 2, 2, 2, 2), fx.AUDIO_UP_KERNELS)):
            x = F.conv_transpose1d(x, sd[f"decoder.ups.{i}.0.weight"], sd[f"decoder.ups.{i}.0.bias"], stride=rate,
                                   padding=(kernel - rate) // 2)
            total = 0
            for j, rk in enumerate(fx.AUDIO_RES_KERNELS):
                p = f"decoder.resblocks.{3 * i + j}"
                y = x
                for n, d in enumerate((1, 3, 5)):
                    r = _conv(_act(y, sd, f"{p}.activations.{2 * n}"), sd, f"{p}.convs1.{n}", dilation=d,
                              padding=(rk - 1) * d // 2)
                    y = y + _conv(_act(r, sd, f"{p}.activations.{2 * n + 1}"), sd, f"{p}.convs2.{n}",
                                  padding=(rk - 1) // 2)
                total = total + y
            x = total / 3
        x = F.conv1d(_act(x, sd, "decoder.activation_post"), sd["decoder.conv_post.weight"], padding=3)
        outs.append(x.clamp(-1, 1)[:, 0])
    return torch.stack(outs, dim=1)


def test_config_read_from_the_weights_and_typed_errors(sd):
    config = av.MiniMaxH3AudioVAEConfig.detect_from_weights(sd)
    assert (config.encoder_dim, config.encoder_rates, config.latent_width, config.latent_channels) == \
        (2, (2, 4, 4, 5, 5), 512, 32)
    assert (config.decoder_dim, config.upsample_kernels, config.resblock_kernels) == \
        (128, (9, 9, 4, 4, 4, 4, 4), (3, 7, 11))
    assert av.is_minimax_h3_audio_vae(sd) and not av.is_minimax_h3_audio_vae(["encoder.block.0.weight"])
    fewer = {k: v for k, v in sd.items() if not k.startswith("decoder.ups.6.")}
    with pytest.raises(av.MiniMaxH3AudioVAEError, match="6 decoder upsamplers"):
        av.MiniMaxH3AudioVAEConfig.detect_from_weights(fewer)
    with pytest.raises(av.MiniMaxH3AudioVAEError, match="latents_mean"):
        av.audio_vae_from_state_dict({**sd, "latents_mean": torch.zeros(8)})


def test_encode_matches_the_equations(model, sd):
    wave = torch.rand(1, 2, 1700, generator=torch.Generator().manual_seed(1)) * 1.6 - 0.8
    with torch.no_grad():
        z = model.encode(wave)
    assert z.shape == (1, 32, 2, 3)  # right-padded to 2400 samples
    torch.testing.assert_close(z, ref_encode(wave, sd), rtol=1e-4, atol=1e-4)


def test_decode_matches_the_equations(model, sd):
    z = torch.randn(1, 32, 2, 2, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        wave = model.decode(z)
    assert wave.shape == (1, 2, 1600)
    expected = ref_decode(z, sd)
    assert expected.abs().max() < 1  # the fixture keeps the clamp out of the comparison
    torch.testing.assert_close(wave, expected, rtol=1e-4, atol=1e-4)


def test_vae_object_crops_fills_channels_and_lays_out_as_comfyui(model, sd):
    patcher = VaePatcher(sd=sd)  # ComfyUI's comfy.sd.VAE(sd=...): the registered kind
    assert isinstance(patcher, av.MiniMaxH3AudioVaePatcher)
    assert (patcher.latent_channels, patcher.latent_dim, patcher.audio_sample_rate,
            patcher.audio_sample_rate_output, patcher.upscale_ratio, patcher.downscale_ratio) == \
        (32, 2, 32000, 32000, 800, 800)
    mono = torch.rand(1, 1700, 1, generator=torch.Generator().manual_seed(3)) - 0.5
    latent = patcher.encode(mono)  # 1600 samples from sample 50, the channel repeated
    with torch.no_grad():
        direct = model.encode(mono[:, 50:1650, 0].unsqueeze(1).expand(-1, 2, -1))
    torch.testing.assert_close(latent, direct)
    wave = patcher.decode(latent)
    assert wave.shape == (1, 1600, 2)
    with torch.no_grad():
        torch.testing.assert_close(wave, model.decode(latent).movedim(1, -1))
    with pytest.raises(av.MiniMaxH3AudioVAEError, match="fewer than one latent frame"):
        patcher.encode(torch.zeros(1, 700, 2))


def test_file_round_trip_through_vae_loader(tmp_path: Path, model):
    from nodes.environment import Environment
    from nodes.loaders import vae_loader
    from tests.nodes.node_context import running_node

    fx.write_audio_vae(tmp_path / "base" / "models" / "vae" / "minimax_h3_audio_vae_fp32.safetensors", seed=2)
    env = Environment.rooted_at(tmp_path / "base")
    env.ensure_dirs()
    with running_node("VAELoader", "1", env):
        (vae,) = vae_loader("minimax_h3_audio_vae_fp32.safetensors")
    assert isinstance(vae, av.MiniMaxH3AudioVaePatcher)
    from nodes.audio_latent import vae_decode_audio, vae_encode_audio
    from nodes.errors import NodeInputError

    wave = torch.rand(1, 2, 1600, generator=torch.Generator().manual_seed(4)) - 0.5
    (latent,) = vae_encode_audio({"waveform": wave, "sample_rate": 32000}, vae)  # VAEEncodeAudio / VAEDecodeAudio
    (audio,) = vae_decode_audio(latent, vae)
    with torch.no_grad():
        torch.testing.assert_close(latent["samples"], model.encode(wave))
        decoded = model.decode(latent["samples"])
    torch.testing.assert_close(audio["waveform"], decoded / (decoded.std(dim=[1, 2], keepdim=True) * 5).clamp_min(1))
    assert audio["sample_rate"] == 32000
    with pytest.raises(NodeInputError, match="samples"):
        vae_decode_audio({"samples": torch.zeros(1, 8, 2, 2)}, vae)
