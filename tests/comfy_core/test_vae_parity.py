"""AutoencoderKL against diffusers (test-only) on the same tiny random LDM-layout weights, and
ComfyUI's pixel conventions."""
from __future__ import annotations

import pytest
import torch

from comfy_core.models.vae import AutoencoderKL, VAEConfig, VAEConfigError
from tests.fixtures.checkpoints import tiny_state_dict

pytest.importorskip("diffusers")
from tests.fixtures.diffusers_oracle import diffusers_vae  # noqa: E402

PREFIX = "first_stage_model."


@pytest.fixture(scope="module")
def pair():
    state = tiny_state_dict("sd1", seed=4)
    config = VAEConfig.detect_from_weights(state, PREFIX)
    with torch.device("meta"):
        ours = AutoencoderKL(config)
    ours.load_state_dict({k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)}, strict=True, assign=True)
    return ours.eval(), diffusers_vae("sd1", state)


def test_config_from_weights():
    config = VAEConfig.detect_from_weights(tiny_state_dict("sd1"), PREFIX)
    assert config == VAEConfig(ch=32, ch_mult=(1, 2, 2, 2), num_res_blocks=1, z_channels=4, embed_dim=4)
    assert config.downscale == 8


def test_encode_matches_diffusers_posterior_mean(pair):
    ours, theirs = pair
    pixels = torch.rand(2, 32, 40, 3, generator=torch.Generator().manual_seed(0))  # [B, H, W, C]
    with torch.no_grad():
        a = ours.encode(pixels)
        b = theirs.encode(pixels.movedim(-1, 1) * 2 - 1).latent_dist.mean
    assert a.shape == (2, 4, 4, 5)
    assert (a - b).abs().max() < 1e-4


def test_decode_matches_diffusers(pair):
    ours, theirs = pair
    z = torch.randn(2, 4, 5, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        raw = ours.decode_raw(z)
        ref = theirs.decode(z).sample
        image = ours.decode(z)
    assert (raw - ref).abs().max() < 1e-4
    assert image.shape == (2, 40, 32, 3)
    assert (image - ((ref + 1) / 2).clamp(0, 1).movedim(1, -1)).abs().max() < 1e-4


def test_encode_center_crops_to_a_multiple_of_8_and_drops_alpha(pair):
    ours, _ = pair
    pixels = torch.rand(1, 21, 19, 4)
    with torch.no_grad():
        cropped = ours.encode(pixels)
        manual = ours.encode(pixels[:, 2:18, 1:17, :3])
    assert cropped.shape == (1, 4, 2, 2)
    assert torch.equal(cropped, manual)


def test_bad_shapes_are_refused(pair):
    ours, _ = pair
    with pytest.raises(VAEConfigError, match="expected a latent"):
        ours.decode(torch.zeros(1, 3, 4, 4))
    with pytest.raises(VAEConfigError, match="smaller than"):
        ours.encode(torch.zeros(1, 4, 4, 3))
