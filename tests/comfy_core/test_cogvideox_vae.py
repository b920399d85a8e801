"""The CogVideoX VAE (comfy_core/models/cogvideox_vae.py) against diffusers 0.42.1's
`AutoencoderKLCogVideoX` on tiny random weights in the release's (diffusers') names, including the
chunked encode (8 frames) and decode (2 latent frames) with the causal cache, and through VAELoader."""
from __future__ import annotations

import pytest
import torch

from comfy_core.loading import load_vae
from comfy_core.models.cogvideox_vae import CogVideoXVAE, CogVideoXVAEConfig
from comfy_core.models.vae import VAEConfigError
from tests.fixtures.template_models_void import TINY_VAE_WIDTHS, tiny_cogvideox_vae_state_dict

pytest.importorskip("diffusers")


def _save(state: dict, path):
    from safetensors.torch import save_file

    save_file(state, str(path))
    return path


@pytest.fixture(scope="module")
def pair():
    from diffusers import AutoencoderKLCogVideoX

    state = tiny_cogvideox_vae_state_dict(seed=1)
    kinds = ("CogVideoXDownBlock3D",) * 4
    ref = AutoencoderKLCogVideoX(block_out_channels=TINY_VAE_WIDTHS, layers_per_block=1, down_block_types=kinds,
                                 up_block_types=("CogVideoXUpBlock3D",) * 4).eval()
    ref.load_state_dict(state)
    ours = CogVideoXVAE(CogVideoXVAEConfig.detect_from_weights(state)).eval()
    ours.load_state_dict(state)
    return ref, ours


@pytest.mark.parametrize("frames", [1, 9, 17])
def test_encode_and_decode_match_diffusers(pair, frames):
    ref, ours = pair
    gen = torch.Generator().manual_seed(frames)
    x = torch.rand(1, 3, frames, 16, 24, generator=gen) * 2 - 1
    latent_frames = (frames - 1) // 4 + 1
    z = torch.randn(1, 16, latent_frames, 2, 3, generator=gen)
    with torch.no_grad():
        theirs, mine = ref.encode(x).latent_dist.mean, ours.encode_raw(x)
        assert mine.shape == (1, 16, latent_frames, 2, 3)
        assert (mine - theirs).abs().max() < 1e-4
        theirs, mine = ref.decode(z).sample, ours.decode_raw(z)
    assert mine.shape == (1, 3, frames, 16, 24)
    assert (mine - theirs).abs().max() < 1e-4


def test_vae_loader_builds_it_from_the_release_layout(tmp_path):
    vae = load_vae(_save(tiny_cogvideox_vae_state_dict(seed=2), tmp_path / "cogvideox_vae.safetensors"))
    assert isinstance(vae.first_stage_model, CogVideoXVAE)
    assert vae.latent_dim == 3 and vae.latent_channels == 16
    frames = torch.rand(9, 20, 28, 3, generator=torch.Generator().manual_seed(3))  # sides cropped to 16 x 24
    latent = vae.encode(frames)
    assert latent.shape == (1, 16, 3, 2, 3)
    pixels = vae.decode(latent)
    assert pixels.shape == (1, 9, 16, 24, 3) and 0.0 <= float(pixels.min()) and float(pixels.max()) <= 1.0


def test_an_incomplete_layout_is_refused():
    state = tiny_cogvideox_vae_state_dict()
    del state["decoder.conv_in.conv.weight"]
    with pytest.raises(VAEConfigError, match="decoder.conv_in"):
        CogVideoXVAEConfig.detect_from_weights(state)
