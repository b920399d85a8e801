"""LTX-Video's causal video VAE (comfy_core/models/ltxv_vae.py): numerics against diffusers'
`AutoencoderKLLTXVideo` on the same tiny random weights (0.9.0 layout and 0.9.1's timestep-
conditioned decoder), the layout read from the weights by the VAE loader, ComfyUI's decoder
padding and decode noise, frame-count checks, and tiled / chunked decodes through the patcher."""
from __future__ import annotations

import pytest
import torch

from comfy_core.loading import load_vae
from comfy_core.models.ltxv_vae import LTXVVAE, LTXVVAEConfig
from comfy_core.models.vae import VAEConfigError
from tests.fixtures.ltxv_files import (diffusers_vae_kwargs, tiny_ltxv_vae_state_dict, tiny_vae_config,
                                       to_diffusers_vae, write_tiny_ltxv_vae)

diffusers = pytest.importorskip("diffusers")
TOLERANCE = 1e-4


def _ours(version: str, **overrides) -> LTXVVAE:
    state = tiny_ltxv_vae_state_dict(version)
    config = LTXVVAEConfig.detect_from_weights(state, **overrides)
    vae = LTXVVAE(config)
    vae.load_state_dict(state, strict=True)
    return vae.eval()


def _reference(version: str) -> torch.nn.Module:
    from diffusers import AutoencoderKLLTXVideo

    model = AutoencoderKLLTXVideo(**diffusers_vae_kwargs(version))
    converted = to_diffusers_vae(tiny_ltxv_vae_state_dict(version))
    model.load_state_dict(converted, strict=True)
    return model.eval()


def _statistics(version: str) -> tuple[torch.Tensor, torch.Tensor]:
    state = tiny_ltxv_vae_state_dict(version)
    view = (1, -1, 1, 1, 1)
    return (state["per_channel_statistics.mean-of-means"].view(view),
            state["per_channel_statistics.std-of-means"].view(view))


@pytest.mark.parametrize("version", ["0.9.0", "0.9.1"])
def test_layout_read_from_weights(version):
    assert LTXVVAEConfig.detect_from_weights(tiny_ltxv_vae_state_dict(version)) == tiny_vae_config(version)


@pytest.mark.parametrize("version", ["0.9.0", "0.9.1"])
def test_encode_matches_diffusers(version):
    ours, reference = _ours(version), _reference(version)
    x = torch.rand(1, 3, 9, 64, 64, generator=torch.Generator().manual_seed(3)) * 2 - 1
    mean, std = _statistics(version)
    with torch.no_grad():
        got = ours.encode_raw(x)
        want = (reference.encode(x).latent_dist.mean - mean) / std
    assert got.shape == (1, 128, 2, 2, 2)
    assert torch.allclose(got, want, atol=TOLERANCE, rtol=0), (got - want).abs().max()


@pytest.mark.parametrize("version", ["0.9.0", "0.9.1"])
def test_decode_matches_diffusers_with_zero_padding(version):
    """diffusers pads the decoder's convolutions with zeros (ComfyUI: reflect); with that one
    setting alike, and no decode noise, the decoders agree."""
    ours, reference = _ours(version, decoder_padding="zeros"), _reference(version)
    z = torch.randn(1, 128, 2, 2, 2, generator=torch.Generator().manual_seed(4))
    mean, std = _statistics(version)
    with torch.no_grad():
        got = ours.decode_raw(z, noise_scale=0.0)
        temb = torch.tensor([0.05]) if version == "0.9.1" else None
        want = reference.decode(z * std + mean, temb=temb).sample
    assert got.shape == (1, 3, 9, 64, 64)
    assert torch.allclose(got, want, atol=TOLERANCE, rtol=0), (got - want).abs().max()


def test_comfyui_decoder_pads_by_reflection_and_mixes_noise():
    reflect, zeros = _ours("0.9.1"), _ours("0.9.1", decoder_padding="zeros")
    assert reflect.config.decoder_padding == "reflect" and reflect.config.encoder_padding == "zeros"
    z = torch.randn(1, 128, 2, 2, 2, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        a = reflect.decode_raw(z, noise_scale=0.0)
        b = zeros.decode_raw(z, noise_scale=0.0)
        torch.manual_seed(0)
        noisy = reflect.decode_raw(z)
        torch.manual_seed(0)
        noisy_again = reflect.decode_raw(z)
        torch.manual_seed(0)
        mixed = reflect.decode_raw(torch.randn_like(z) * 0.025 + 0.975 * z, noise_scale=0.0)
    assert not torch.allclose(a, b, atol=1e-4)
    assert torch.equal(noisy, noisy_again) and torch.allclose(noisy, mixed, atol=1e-6)
    assert not torch.allclose(noisy, a, atol=1e-5)


def test_frames_must_be_eight_k_plus_one():
    vae = _ours("0.9.0")
    with pytest.raises(VAEConfigError, match="1 \\+ 8"):
        vae.encode_raw(torch.zeros(1, 3, 10, 32, 32))
    latent = vae.encode(torch.rand(9, 40, 70, 3))  # sides centre-cropped to 32 x 64
    assert latent.shape == (1, 128, 2, 1, 2)


def test_vae_loader_builds_it_and_patcher_tiles(tmp_path):
    vae = load_vae(write_tiny_ltxv_vae(tmp_path / "ltxv_vae.safetensors", "0.9.1", prefix="vae."))
    assert isinstance(vae.first_stage_model, LTXVVAE)
    assert vae.latent_dim == 3 and vae.latent_channels == 128
    assert vae.downscale_index_formula == (8, 32, 32) and vae.temporal_compression_decode() == 8
    assert vae.downscale_ratio[0](17) == 3 and vae.upscale_ratio[0](3) == 17
    frames = torch.rand(9, 64, 64, 3, generator=torch.Generator().manual_seed(6))
    latent = vae.encode(frames)
    assert latent.shape == (1, 128, 2, 2, 2)
    torch.manual_seed(1)
    pixels = vae.decode(latent)
    assert pixels.shape == (1, 9, 64, 64, 3) and 0.0 <= float(pixels.min()) and float(pixels.max()) <= 1.0
    longer = torch.randn(1, 128, 3, 2, 2, generator=torch.Generator().manual_seed(7))
    tiled = vae.decode_tiled(longer, tile_x=2, tile_y=2, overlap=0, tile_t=2, overlap_t=1)  # two time tiles
    assert tiled.shape == (1, 17, 64, 64, 3)
    per_video = vae.memory_used_decode((1, 128, 2, 2, 2), torch.float32)
    assert per_video > 0 and vae.memory_used_decode((2, 128, 2, 2, 2), torch.float32) == 2 * per_video
    assert vae.memory_used_decode((1, 128, 4, 2, 2), torch.float32) > per_video  # the clip decodes whole


def test_malformed_layout_is_refused():
    state = tiny_ltxv_vae_state_dict("0.9.1")
    state.pop("encoder.conv_out.conv.weight")
    with pytest.raises(VAEConfigError, match="conv_out"):
        LTXVVAEConfig.detect_from_weights(state)


# --- LTX-2 / 2.3: the layout the weights cannot tell, from the file's own `config` metadata ---

def _ltx2_reference_decoder(state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """diffusers' LTX-2 video decoder at the tiny LTX-2.3 layout (tests/fixtures/ltxv_files.py's
    LTX2_VAE_FILE_CONFIG: space-only, time-only and two 2x2x2 plain upsamplers, zero padding),
    our weights renamed to its modules (no values changed)."""
    from diffusers.models.autoencoders.autoencoder_kl_ltx2 import LTX2VideoDecoder3d

    decoder = LTX2VideoDecoder3d(
        in_channels=128, block_out_channels=(16, 32, 32, 64), layers_per_block=(1, 1, 1, 1, 1),
        # upsample_type in the decoder's order (diffusers reverses the other lists, not this one)
        spatio_temporal_scaling=True, upsample_type=("spatiotemporal", "spatiotemporal", "temporal", "spatial"),
        upsample_residual=False, upsample_factor=(2, 2, 1, 2), inject_noise=False, spatial_padding_mode="zeros")
    renamed = {}
    for name, value in state.items():
        if not name.startswith("decoder."):
            continue
        parts = name.removeprefix("decoder.").replace(".res_blocks.", ".resnets.").split(".")
        if parts[0] == "up_blocks":  # ours: res, up, res, up, ...; theirs: mid_block, then (upsampler, resnets)
            index = int(parts[1])
            if index == 0:
                parts[:2] = ["mid_block"]
            elif index % 2:
                parts[:2] = ["up_blocks", str((index - 1) // 2), "upsamplers", "0"]
            else:
                parts[:2] = ["up_blocks", str(index // 2 - 1)]
        renamed[".".join(parts)] = value
    decoder.load_state_dict(renamed, strict=True)
    return decoder.eval()


def test_ltx2_layout_comes_from_the_files_config(tmp_path):
    """LTX-2.3's decoder: plain upsamplers that narrow and space-only / time-only ones, which the
    0.9.x reading of the weights alone takes for residual ones; its file says so."""
    from tests.fixtures.ltxv_files import LTX2_VAE_FILE_CONFIG

    bare = load_vae(write_tiny_ltxv_vae(tmp_path / "bare.safetensors", "ltx2"))
    described = load_vae(write_tiny_ltxv_vae(tmp_path / "ltx2_vae.safetensors", "ltx2",
                                             file_config=LTX2_VAE_FILE_CONFIG))
    kinds = [(kind, residual) for kind, _, residual in described.first_stage_model.config.decoder_blocks
             if kind.startswith("compress")]
    assert kinds == [("compress_all", False), ("compress_all", False), ("compress_time", False),
                     ("compress_space", False)]
    assert described.first_stage_model.config == tiny_vae_config("ltx2")
    assert [residual for kind, _, residual in bare.first_stage_model.config.decoder_blocks
            if kind.startswith("compress")] == [True, False, True, True]
    assert described.downscale_index_formula == (8, 32, 32)


def test_ltx2_decode_matches_diffusers(tmp_path):
    from tests.fixtures.ltxv_files import LTX2_VAE_FILE_CONFIG

    state = tiny_ltxv_vae_state_dict("ltx2")
    vae = load_vae(write_tiny_ltxv_vae(tmp_path / "ltx2_vae.safetensors", "ltx2", file_config=LTX2_VAE_FILE_CONFIG))
    reference = _ltx2_reference_decoder(state)
    z = torch.randn(1, 128, 3, 2, 3, generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        got = vae.first_stage_model.decoder(z)
        want = reference(z, causal=False)
    assert got.shape == (1, 3, 17, 64, 96)
    assert torch.allclose(got, want, atol=TOLERANCE, rtol=0), (got - want).abs().max()
    pixels = vae.decode(vae.encode(torch.rand(9, 64, 64, 3, generator=torch.Generator().manual_seed(12))))
    assert pixels.shape == (1, 9, 64, 64, 3)


def test_ltx2_file_config_that_contradicts_the_weights_is_refused(tmp_path):
    from comfy_core.checkpoint.errors import ShapeMismatchError
    from tests.fixtures.ltxv_files import LTX2_VAE_FILE_CONFIG

    swapped = dict(LTX2_VAE_FILE_CONFIG)
    blocks = list(swapped["decoder_blocks"])
    blocks[1], blocks[3] = blocks[3], blocks[1]  # time-only where the weights hold a space-only stage
    swapped["decoder_blocks"] = blocks
    with pytest.raises(ShapeMismatchError, match="'compress_space' where the weights hold a 'compress_time'"):
        load_vae(write_tiny_ltxv_vae(tmp_path / "swapped.safetensors", "ltx2", file_config=swapped))
    short = dict(LTX2_VAE_FILE_CONFIG, decoder_blocks=LTX2_VAE_FILE_CONFIG["decoder_blocks"][:-1])
    with pytest.raises(ShapeMismatchError, match="8 decoder blocks.*9"):
        load_vae(write_tiny_ltxv_vae(tmp_path / "short.safetensors", "ltx2", file_config=short))
