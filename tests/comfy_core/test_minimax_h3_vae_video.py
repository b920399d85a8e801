"""MiniMax H3's video VAE (comfy_core/families/minimax_h3/video_vae.py) against its equations.

The reference below is composed by hand from the tiny file's tensors (tests/fixtures/
minimax_h3_vae_files.py, ComfyUI's names) with other formulations than the module's: one frame
through 2-D convolutions of the last temporal taps, GroupNorm frame by frame, RoPE as a complex
product, attention as an explicit softmax, tokens written back one by one. Then ComfyUI's chunk /
tile plans by hand, the VAE object's layouts, the file through VAELoader, and the int8 ConvRot file
against its dequantised twin.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families.minimax_h3 import video_vae as vv
from comfy_core.patching.vae import VaePatcher
from tests.fixtures import minimax_h3_vae_files as fx

MEAN = torch.tensor((0.485, 0.456, 0.406)).view(1, 3, 1, 1, 1)
STD = torch.tensor((0.229, 0.224, 0.225)).view(1, 3, 1, 1, 1)


@pytest.fixture(scope="module")
def sd() -> dict[str, torch.Tensor]:
    return fx.video_vae_state(seed=3)


@pytest.fixture(scope="module")
def model(sd):
    return vv.video_vae_from_state_dict(sd)


# --- the hand-composed reference ---

def _conv(x, sd, name, stride=1, front=2, spatial=(1, 1, 1, 1)):
    if any(spatial):
        x = F.pad(x, (*spatial, 0, 0), mode="reflect")
    x = F.pad(x, (0, 0, 0, 0, front, 0))
    return F.conv3d(x, sd[name + ".weight"], sd[name + ".bias"], stride=stride)


def _conv_one_frame(x, sd, name, stride=1, spatial=(1, 1, 1, 1)):
    """A single frame: the two zero frames in front leave only the last temporal tap."""
    if any(spatial):
        x = F.pad(x[:, :, 0], spatial, mode="reflect")
    else:
        x = x[:, :, 0]
    w = sd[name + ".weight"][:, :, -1]
    return F.conv2d(x, w, sd[name + ".bias"], stride=stride).unsqueeze(2)


def _norm_silu(x, sd, name):
    frames = [F.group_norm(x[:, :, t], 32, sd[name + ".weight"], sd[name + ".bias"], 1e-6) for t in range(x.shape[2])]
    return F.silu(torch.stack(frames, dim=2))


def ref_moments(x, sd):
    """Normalised pixels [B, 3, T, H, W] -> quant_conv's moments."""
    one = x.shape[2] == 1
    conv = (lambda h, n, **kw: _conv_one_frame(h, sd, n, **{k: v for k, v in kw.items() if k != "front"})) if one \
        else (lambda h, n, **kw: _conv(h, sd, n, **kw))
    h = conv(x, "encoder.conv_in")
    for level in range(6):
        p = f"encoder.down.{level}.block.0"
        r = conv(_norm_silu(h, sd, p + ".norm1"), p + ".conv1")
        h = h + conv(_norm_silu(r, sd, p + ".norm2"), p + ".conv2")
        if level < 4:
            stride = (1 if level in (0, 3) else 2, 2, 2)
            if one:
                h = _conv_one_frame(h, sd, f"encoder.down.{level}.downsample.conv", stride=2, spatial=(0, 1, 0, 1))
            else:
                h = _conv(h, sd, f"encoder.down.{level}.downsample.conv", stride=stride, spatial=(0, 1, 0, 1))
    h = conv(_norm_silu(h, sd, "encoder.norm_out"), "encoder.conv_out")
    return F.conv3d(h, sd["quant_conv.weight"], sd["quant_conv.bias"])


def _normalised_mean(moments, sd):
    mean = moments[:, :24]
    return (mean - sd["latents_mean"].view(1, -1, 1, 1, 1)) / sd["latents_std"].view(1, -1, 1, 1, 1)


def _rms(x, w=None, eps=1e-5):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def ref_decoder(z, sd):
    """Denormalised latent [B, 24, t, h, w] -> raw decoder pixels [B, 3, 4t, 16h, 16w]."""
    z = F.conv3d(z, sd["post_quant_conv.weight"], sd["post_quant_conv.bias"])
    b, c, t, h, w = z.shape
    cells = list(itertools.product(range(t), range(h), range(w)))
    x = torch.stack([z[:, :, i, j, k] for i, j, k in cells], dim=1) @ sd["decoder.x_embedder.weight"].T \
        + sd["decoder.x_embedder.bias"]
    width = x.shape[-1]
    x = torch.cat([x, sd["decoder.register_tokens"].expand(b, -1, -1), torch.zeros(b, 1, width)], dim=1)
    ids = [[(i + 0.5) / t * 2 - 1, (j + 0.5) / h * 2 - 1, (k + 0.5) / w * 2 - 1] for i, j, k in cells]
    ids = torch.tensor(ids + [[0.0, 0.0, 0.0]] * (x.shape[1] - len(cells)))
    freqs = torch.tensor([100.0 ** (-m / 8) for m in range(8)])  # 48 rotated channels: 8 frequencies an axis
    angle = torch.cat([2 * math.pi * ids[:, a:a + 1] * freqs for a in range(3)], dim=1)  # [S, 24]
    rot = torch.polar(torch.ones_like(angle), angle)
    heads = width // 64

    def rope(v):  # [B, S, H, 64]: channel i paired with i + 24 for i < 24
        cplx = torch.complex(v[..., :24], v[..., 24:48]) * rot[None, :, None, :]
        return torch.cat([cplx.real, cplx.imag, v[..., 48:]], dim=-1)

    for n in range(fx.VIT_DEPTH):
        p = f"decoder.transformer_blocks.{n}."
        qkv = _rms(x, sd[p + "norm1.weight"]) @ sd[p + "attn.to_qkv.weight"].T + sd[p + "attn.to_qkv.bias"]
        qkv = qkv.view(b, -1, heads, 192)
        q, k, v = rope(_rms(qkv[..., :64])), rope(_rms(qkv[..., 64:128])), qkv[..., 128:]
        weights = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", q, k) / 8.0, dim=-1)
        out = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, -1, width)
        x = x + sd[p + "scale1"] * (out @ sd[p + "attn.to_out.weight"].T + sd[p + "attn.to_out.bias"])
        u = _rms(x, sd[p + "norm2.weight"]) @ sd[p + "ff.w1.weight"].T + sd[p + "ff.w1.bias"]
        gate, up = u[..., :4 * width], u[..., 4 * width:]
        x = x + sd[p + "scale2"] * ((F.silu(gate) * up) @ sd[p + "ff.w2.weight"].T + sd[p + "ff.w2.bias"])
    y = F.layer_norm(x, (width,), sd["decoder.norm_out.weight"], sd["decoder.norm_out.bias"], 1e-5)
    y = y @ sd["decoder.proj_out.weight"].T + sd["decoder.proj_out.bias"]
    out = torch.zeros(b, 3, 4 * t, 16 * h, 16 * w)
    for s, (i, j, k) in enumerate(cells):
        out[:, :, 4 * i:4 * i + 4, 16 * j:16 * j + 16, 16 * k:16 * k + 16] = y[:, s].view(b, 3, 4, 16, 16)
    return out


def _denorm(z, sd):
    return z * sd["latents_std"].view(1, -1, 1, 1, 1) + sd["latents_mean"].view(1, -1, 1, 1, 1)


def _finish(raw):
    return (raw * STD + MEAN).clamp(0, 1)


def _fade(a, b, n):
    ramp = (torch.arange(n) / n).view(1, 1, n, 1, 1)
    return torch.cat([a[:, :, -n:] * (1 - ramp) + b[:, :, :n] * ramp, b[:, :, n:]], dim=2)


# --- tests ---

def test_config_read_from_the_weights_and_typed_errors(sd):
    config = vv.MiniMaxH3VideoVAEConfig.detect_from_weights(sd)
    assert (config.ch, config.ch_mult, config.num_res_blocks) == (32, (1,) * 6, (1,) * 6)
    assert (config.z_channels, config.embed_dim, config.width, config.depth, config.register_tokens) == \
        (24, 24, 64, 1, 4)
    assert vv.is_minimax_h3_video_vae(sd) and not vv.is_minimax_h3_video_vae(["encoder.conv_in.weight"])
    fewer = {k: v for k, v in sd.items() if not k.startswith("encoder.down.5.")}
    with pytest.raises(vv.MiniMaxH3VideoVAEError, match="5 encoder levels"):
        vv.MiniMaxH3VideoVAEConfig.detect_from_weights(fewer)
    with pytest.raises(vv.MiniMaxH3VideoVAEError, match="latents_std"):
        vv.MiniMaxH3VideoVAEConfig.detect_from_weights({**sd, "latents_std": torch.ones(3)})


def test_decoder_matches_the_equations(model, sd):
    z = torch.randn(1, 24, 2, 2, 1, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = model.decoder(model.post_quant_conv(z))
    torch.testing.assert_close(ours, ref_decoder(z, sd), rtol=1e-4, atol=1e-4)


def test_one_frame_encodes_and_decodes_as_the_equations(model, sd):
    x = torch.rand(1, 3, 1, 32, 32, generator=torch.Generator().manual_seed(2)) * 2 - 1
    with torch.no_grad():
        z = model.encode(x)
        pixels = model.decode(z)
    ref = _normalised_mean(ref_moments(((x + 1) / 2 - MEAN) / STD, sd), sd)
    assert z.shape == (1, 24, 1, 2, 2)
    torch.testing.assert_close(z, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(pixels, _finish(ref_decoder(_denorm(z, sd), sd)[:, :, -1:]), rtol=1e-4, atol=1e-4)


def test_frames_encode_as_a_padded_17_frame_clip_less_the_dropped_latents(model, sd):
    x = torch.rand(1, 3, 5, 32, 32, generator=torch.Generator().manual_seed(4)) * 2 - 1
    with torch.no_grad():
        z = model.encode(x)
    clip = torch.cat([x, x[:, :, -1:].expand(-1, -1, 12, -1, -1)], dim=2)  # 17 frames, the last repeated
    moments = ref_moments(((clip + 1) / 2 - MEAN) / STD, sd)
    assert moments.shape[2] == 5
    torch.testing.assert_close(z, _normalised_mean(moments[:, :, :2], sd), rtol=1e-4, atol=1e-4)


def test_temporal_decode_follows_comfyuis_chunk_plan(model, sd):
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        # 2 latents: padded with 5 copies of the last, one chunk of 7 -> frames 3..7 of its 28
        z2 = torch.randn(1, 24, 2, 1, 1, generator=g)
        padded = _denorm(torch.cat([z2, z2[:, :, -1:].expand(-1, -1, 5, -1, -1)], dim=2), sd)
        torch.testing.assert_close(model.decode(z2), _finish(ref_decoder(padded, sd)[:, :, 3:8]),
                                   rtol=1e-4, atol=1e-4)
        # 12 latents: chunks [0, 7) and [5, 12); 17 frames, 17 after a 5-frame cross-fade, the last 5
        z = torch.randn(1, 24, 12, 1, 1, generator=g)
        first, second = ref_decoder(_denorm(z[:, :, 0:7], sd), sd), ref_decoder(_denorm(z[:, :, 5:12], sd), sd)
        expected = torch.cat([first[:, :, 3:20], _fade(first[:, :, 23:28], second[:, :, 3:20], 5),
                              second[:, :, 23:28]], dim=2)
        ours = model.decode(z)
    assert ours.shape == (1, 3, 39, 16, 16)
    torch.testing.assert_close(ours, _finish(expected), rtol=1e-4, atol=1e-4)


def test_frame_counts_are_comfyuis(model):
    assert [model.decoded_frames(5 * k + 2) for k in range(4)] == [17 * k + 5 for k in range(4)]
    assert model.decoded_frames(1) == 1
    assert [vv._frames_to_latents(f) for f in (1, 5, 21, 22, 39)] == [1, 2, 2, 7, 12]
    assert vv.tile_plan(320, 256, 64, 16) == ([0, 64], [256, 256], [192])
    assert vv.tile_plan(200, 256, 64, 16) == ([0], [200], [])
    assert vv.tile_plan(48, 32, 64, 16) == ([0, 16], [32, 32], [16])


def test_space_is_tiled_and_cross_faded_as_comfyui(sd):
    config = dataclasses.replace(vv.MiniMaxH3VideoVAEConfig.detect_from_weights(sd), tile_size=32)
    small = vv.MiniMaxH3VideoVAE(config)
    small.load_state_dict(sd)
    z = torch.randn(1, 24, 1, 3, 3, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        ours = small.decode(z)
    zd = _denorm(z, sd)
    tiles = [[ref_decoder(zd[..., i:i + 2, j:j + 2], sd)[:, :, -1:] for j in (0, 1)] for i in (0, 1)]

    def fade(a, b, dim):  # 16 pixels: b's head faded in over a's tail
        ramp = (torch.arange(16) / 16).view([1] * (5 + dim) + [16] + [1] * (-dim - 1))
        return torch.cat([a.narrow(dim, 16, 16) * (1 - ramp) + b.narrow(dim, 0, 16) * ramp, b.narrow(dim, 16, 16)],
                         dim=dim)

    top_left, top_right = tiles[0][0][..., :16, :16], fade(tiles[0][0], tiles[0][1], -1)[..., :16, :]
    bottom_left = fade(tiles[0][0], tiles[1][0], -2)[..., :16]
    bottom_right = fade(tiles[1][0], fade(tiles[0][1], tiles[1][1], -2), -1)
    expected = torch.cat([torch.cat([top_left, top_right], -1), torch.cat([bottom_left, bottom_right], -1)], -2)
    assert ours.shape == (1, 3, 1, 48, 48)
    torch.testing.assert_close(ours, _finish(expected), rtol=1e-4, atol=1e-4)


def test_vae_object_layouts_and_comfyui_attributes(model, sd):
    patcher = VaePatcher(sd=sd)  # ComfyUI's comfy.sd.VAE(sd=...): the registered kind
    assert isinstance(patcher, vv.MiniMaxH3VideoVaePatcher)
    assert (patcher.latent_channels, patcher.latent_dim, patcher.spacial_compression_decode()) == (24, 3, 16)
    assert patcher.downscale_ratio[0](22) == 7 and patcher.upscale_ratio[0](7) == 22
    assert patcher.downscale_index_formula == (4, 16, 16) and patcher.temporal_compression_decode() == 3
    frames = torch.rand(5, 36, 40, 4, generator=torch.Generator().manual_seed(7))  # cropped, centred: 32 x 32
    latent = patcher.encode(frames)
    with torch.no_grad():
        direct = model.encode(frames[:, 2:34, 4:36, :3].permute(3, 0, 1, 2).unsqueeze(0) * 2 - 1)
    torch.testing.assert_close(latent, direct)
    video = patcher.decode(latent)
    assert video.shape == (1, 5, 32, 32, 3)
    with torch.no_grad():
        torch.testing.assert_close(video, model.decode(latent).movedim(1, -1))
    with pytest.raises(vv.MiniMaxH3VideoVAEError, match="expected a latent"):
        patcher.decode(torch.zeros(1, 16, 2, 2, 2))


@pytest.fixture(scope="module")
def vae_files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mmvae") / "base"
    vae_dir = root / "models" / "vae"
    fx.write_video_vae(vae_dir / "minimax_h3_video_vae_fp16.safetensors", seed=3)
    path = fx.write_video_vae(vae_dir / "minimax_h3_video_vae_int8_convrot.safetensors", seed=3, int8_convrot=True)
    from safetensors.torch import load_file, save_file

    twin = fx.dequantized_state(load_file(str(path)))
    save_file(twin, str(vae_dir / "minimax_h3_video_vae_twin.safetensors"))
    return root


def _loader(root: Path, name: str):
    from nodes.environment import Environment
    from nodes.loaders import vae_loader
    from tests.nodes.node_context import running_node

    env = Environment.rooted_at(root)
    env.ensure_dirs()
    with running_node("VAELoader", "1", env):
        return vae_loader(name)[0]


def test_file_round_trip_through_vae_loader(vae_files, sd):
    vae = _loader(vae_files, "minimax_h3_video_vae_fp16.safetensors")
    assert isinstance(vae, vv.MiniMaxH3VideoVaePatcher)
    half = vv.video_vae_from_state_dict({k: v.half().float() for k, v in sd.items()})
    frames = torch.rand(5, 32, 32, 3, generator=torch.Generator().manual_seed(8))
    from nodes.latent import vae_decode, vae_encode

    (latent,) = vae_encode(frames, vae)  # VAEEncode / VAEDecode: IMAGE frames in, one frame batch out
    latent = latent["samples"]
    (images,) = vae_decode({"samples": latent}, vae)
    with torch.no_grad():
        torch.testing.assert_close(latent, half.encode(frames.permute(3, 0, 1, 2).unsqueeze(0) * 2 - 1))
        torch.testing.assert_close(images, half.decode(latent)[0].movedim(0, -1))


def test_int8_convrot_file_equals_its_dequantised_twin(vae_files, sd):
    quant = _loader(vae_files, "minimax_h3_video_vae_int8_convrot.safetensors")
    twin = _loader(vae_files, "minimax_h3_video_vae_twin.safetensors")
    from comfy_core.models.quant_linear import QuantizedLinear

    block = quant.model.decoder.transformer_blocks[0]
    assert all(isinstance(layer, QuantizedLinear) and layer.weight.dtype == torch.int8
               for layer in (block.attn.to_qkv, block.attn.to_out, block.ff.w1, block.ff.w2))
    latent = torch.randn(1, 24, 2, 2, 2, generator=torch.Generator().manual_seed(9))
    ours = quant.decode(latent)
    torch.testing.assert_close(ours, twin.decode(latent), rtol=1e-4, atol=1e-4)
    exact = vv.video_vae_from_state_dict({k: v.half().float() for k, v in sd.items()})
    with torch.no_grad():
        unquantised = exact.decode(latent).movedim(1, -1)
    error = (ours - unquantised).abs().max().item()
    assert 0 < error < 0.05  # int8 rows of 127 steps: a few percent of the 0..1 range at most
