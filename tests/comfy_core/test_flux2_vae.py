"""Flux.2's autoencoder: loaded by the VAE loader from a ComfyUI-named file with the latent
statistics, against diffusers' `AutoencoderKLFlux2` plus the Flux2Pipeline's patching and
batch-norm normalisation."""
from __future__ import annotations

import pytest
import torch

from comfy_core.loading import load_vae
from comfy_core.models.flux2_vae import Flux2AutoencoderKL
from comfy_core.models.vae import VAEConfigError
from tests.fixtures.flux2_files import diffusers_flux2_vae, tiny_flux2_vae_state_dict, write_flux2_vae


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    pytest.importorskip("diffusers")
    root = tmp_path_factory.mktemp("flux2vae")
    return diffusers_flux2_vae(tiny_flux2_vae_state_dict(seed=1)), load_vae(write_flux2_vae(root, seed=1))


def _pipeline_normalize(reference, mean: torch.Tensor) -> torch.Tensor:
    # diffusers' Flux2Pipeline: patchify 2x2 (channel 4c + 2i + j), then (z - running_mean) / sqrt(var + eps)
    b, c, h, w = mean.shape
    z = mean.view(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4).reshape(b, c * 4, h // 2, w // 2)
    bn = reference.bn
    return (z - bn.running_mean.view(1, -1, 1, 1)) / torch.sqrt(bn.running_var.view(1, -1, 1, 1)
                                                               + reference.config.batch_norm_eps)


def test_file_with_latent_statistics_builds_the_flux2_vae(pair):
    _, vae = pair
    assert isinstance(vae.model, Flux2AutoencoderKL)
    assert vae.latent_channels == 128 and vae.model.downscale_ratio == 4  # 2x (tiny) times the 2x2 patches


def test_encode_matches_diffusers_and_the_pipelines_normalisation(pair):
    reference, vae = pair
    pixels = torch.rand(2, 16, 12, 3, generator=torch.Generator().manual_seed(0))
    ours = vae.encode(pixels)
    with torch.no_grad():
        mean = reference.encode(pixels.movedim(-1, 1) * 2 - 1).latent_dist.mean
    theirs = _pipeline_normalize(reference, mean)
    assert ours.shape == (2, 128, 4, 3)
    assert (ours - theirs).abs().max() < 1e-4


def test_decode_matches_diffusers_after_denormalising(pair):
    reference, vae = pair
    latent = torch.randn(1, 128, 3, 2, generator=torch.Generator().manual_seed(1))
    ours = vae.decode(latent)
    bn = reference.bn
    z = latent * torch.sqrt(bn.running_var.view(1, -1, 1, 1) + reference.config.batch_norm_eps) \
        + bn.running_mean.view(1, -1, 1, 1)
    b, c4, h, w = z.shape
    z = z.reshape(b, c4 // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3).reshape(b, c4 // 4, h * 2, w * 2)
    with torch.no_grad():
        theirs = reference.decode(z).sample
    theirs = ((theirs + 1) / 2).clamp(0, 1).movedim(1, -1)
    assert ours.shape == (1, 12, 8, 3)
    assert (ours - theirs).abs().max() < 1e-4


def test_a_latent_of_the_wrong_width_is_a_typed_error(pair):
    _, vae = pair
    with pytest.raises(VAEConfigError, match="Flux.2 latent"):
        vae.decode(torch.zeros(1, 32, 4, 4))


def test_tiled_coding_works_on_flux2_latents(pair):
    _, vae = pair
    latent = torch.randn(1, 128, 6, 5, generator=torch.Generator().manual_seed(2))
    whole = vae.decode(latent)
    tiled = vae.decode_tiled(latent, tile_x=4, tile_y=4, overlap=1)
    assert tiled.shape == whole.shape == (1, 24, 20, 3)
    single = vae.decode_tiled(latent, tile_x=64, tile_y=64, overlap=8)  # one tile: the plain decode
    assert (single - whole).abs().max() < 1e-5
    pixels = torch.rand(1, 16, 16, 3, generator=torch.Generator().manual_seed(3))
    assert vae.encode_tiled(pixels, tile_x=64, tile_y=64, overlap=8).shape == (1, 128, 4, 4)


def test_small_decoder_file_decodes_as_diffusers_with_its_narrower_decoder(tmp_path):
    """BFL's `full_encoder_small_decoder` (the FLUX.2 small decoder): the decoder's width is read from
    `decoder.conv_in` (the encoder's level multipliers kept), as ComfyUI reads it; diffusers' model
    with `decoder_block_out_channels` decodes the same pixels."""
    pytest.importorskip("diffusers")
    from diffusers import AutoencoderKLFlux2
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

    from comfy_core.models.vae import VAEConfig
    from tests.fixtures.dit_checkpoints import save
    from tests.fixtures.template_models_flux2 import SMALL_DECODER_CH, tiny_small_decoder_vae_state_dict

    state = tiny_small_decoder_vae_state_dict(seed=5)
    config = VAEConfig.detect_from_weights(state, "")
    assert (config.ch, config.decoder_ch, config.ch_mult) == (2 * SMALL_DECODER_CH, SMALL_DECODER_CH, (1, 1, 1, 1))
    vae = load_vae(save(state, tmp_path / "full_encoder_small_decoder.safetensors"))
    assert vae.model.decoder.conv_out.weight.shape[1] == SMALL_DECODER_CH

    kwargs = dict(block_out_channels=[2 * SMALL_DECODER_CH] * 4, decoder_block_out_channels=[SMALL_DECODER_CH] * 4,
                  layers_per_block=1, latent_channels=32, norm_num_groups=32,
                  down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4)
    converted = convert_ldm_vae_checkpoint({k: v for k, v in state.items() if not k.startswith("bn.")},
                                           {**kwargs, "in_channels": 3, "out_channels": 3})
    converted.update({k: v for k, v in state.items() if k.startswith("bn.")})
    reference = AutoencoderKLFlux2(**kwargs)
    reference.load_state_dict(converted, strict=True)
    latent = torch.randn(1, 128, 2, 3, generator=torch.Generator().manual_seed(6))
    bn = reference.bn
    z = latent * torch.sqrt(bn.running_var.view(1, -1, 1, 1) + reference.config.batch_norm_eps) \
        + bn.running_mean.view(1, -1, 1, 1)
    z = z.reshape(1, 32, 2, 2, 2, 3).permute(0, 1, 4, 2, 5, 3).reshape(1, 32, 4, 6)
    with torch.no_grad():
        theirs = ((reference.eval().decode(z).sample + 1) / 2).clamp(0, 1).movedim(1, -1)
    ours = vae.decode(latent)
    assert ours.shape == theirs.shape == (1, 32, 48, 3)
    assert (ours - theirs).abs().max() < 1e-4


def test_a_decoder_width_that_does_not_fit_the_levels_is_a_typed_error():
    from comfy_core.models.vae import VAEConfig

    state = tiny_flux2_vae_state_dict(seed=1)  # 32 x (1, 2): the decoder's first convolution gives 64
    state["decoder.conv_in.weight"] = torch.zeros(63, 32, 3, 3)
    with pytest.raises(VAEConfigError, match="not a multiple of the deepest level's multiplier 2"):
        VAEConfig.detect_from_weights(state, "")
