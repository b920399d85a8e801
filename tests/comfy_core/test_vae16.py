"""The 16-channel SD3 / Flux.1 autoencoder (AutoencoderKL without quantisation convolutions):
detection from headers, numerics against diffusers' `AutoencoderKL(latent_channels=16,
use_quant_conv=False, use_post_quant_conv=False)` on the same tiny weights, and the file
layouts through VAELoader's path (`comfy_core.loading.load_vae` is `VaePatcher(vae_module_from(file))`;
the two are used here, so these tests do not depend on the rest of the loader)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.checkpoint.errors import ShapeMismatchError
from comfy_core.models.vae import AutoencoderKL, VAEConfig, VAEConfigError
from comfy_core.patching.vae import VaePatcher
from comfy_core.patching.vae_build import vae_module_from
from tests.fixtures.vae16_files import PREFIXES, tiny_vae16_state_dict, vae16_shapes, write_tiny_vae16

EXPECTED = VAEConfig(ch=32, ch_mult=(1, 2, 2, 2), num_res_blocks=1, z_channels=16, embed_dim=16,
                     use_quant_conv=False)


def load_vae(path) -> VaePatcher:
    """What VAELoader does with a file (comfy_core.loading.load_vae, default options)."""
    return VaePatcher(vae_module_from(path), load_device="cpu", offload_device="cpu")


def header(shapes: dict[str, tuple[int, ...]]) -> dict[str, SimpleNamespace]:
    """Header entries only (name -> object with `.shape`), no tensor data."""
    return {name: SimpleNamespace(shape=shape) for name, shape in shapes.items()}


@pytest.fixture(scope="module")
def bfl_state():
    return tiny_vae16_state_dict("bfl", seed=5)


@pytest.fixture(scope="module")
def ours(bfl_state):
    config = VAEConfig.detect_from_weights(bfl_state, "")
    with torch.device("meta"):
        vae = AutoencoderKL(config)
    vae.load_state_dict(bfl_state, strict=True, assign=True)
    return vae.eval()


@pytest.fixture(scope="module")
def theirs():
    diffusers = pytest.importorskip("diffusers")
    from tests.fixtures.vae16_files import diffusers_vae16_config

    state = tiny_vae16_state_dict("diffusers", seed=5)
    with torch.device("meta"):
        model = diffusers.AutoencoderKL(**diffusers_vae16_config())
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


@pytest.mark.parametrize("prefix", ["", "first_stage_model.", "vae."])
def test_detects_16_channels_and_no_quant_convs_from_the_header(prefix):
    config = VAEConfig.detect_from_weights(header(vae16_shapes(prefix)), prefix)
    assert config == EXPECTED
    assert config.downscale == 8


def test_module_has_the_bfl_names_and_no_quant_convs(bfl_state):
    with torch.device("meta"):
        vae = AutoencoderKL(EXPECTED)
    assert set(vae.state_dict()) == set(bfl_state)
    assert not hasattr(vae, "quant_conv") and not hasattr(vae, "post_quant_conv")
    assert vae.latent_channels == 16


def test_sd_vae_keeps_its_quant_convs():
    from tests.fixtures.checkpoints import _VAEArch, vae_shapes

    config = VAEConfig.detect_from_weights(header(vae_shapes(_VAEArch())), "first_stage_model.")
    assert config.use_quant_conv and config.embed_dim == 4
    with torch.device("meta"):
        assert {"quant_conv.weight", "post_quant_conv.weight"} <= set(AutoencoderKL(config).state_dict())


def test_inconsistent_keys_are_refused():
    shapes = vae16_shapes()
    with_one = {**shapes, "quant_conv.weight": (32, 32, 1, 1), "quant_conv.bias": (32,)}
    with pytest.raises(VAEConfigError, match="no post_quant_conv"):
        VAEConfig.detect_from_weights(header(with_one), "")
    wrong_decoder = {**shapes, "decoder.conv_in.weight": (64, 4, 3, 3)}
    with pytest.raises(VAEConfigError, match="decoder.conv_in takes 4"):
        VAEConfig.detect_from_weights(header(wrong_decoder), "")
    with pytest.raises(VAEConfigError, match="must equal z_channels"):
        VAEConfig(z_channels=16, embed_dim=4, use_quant_conv=False)


def test_encode_matches_diffusers_posterior_mean(ours, theirs):
    pixels = torch.rand(2, 16, 24, 3, generator=torch.Generator().manual_seed(0))  # [B, H, W, C]
    with torch.no_grad():
        mean = ours.encode(pixels)
        reference = theirs.encode(pixels.movedim(-1, 1) * 2 - 1).latent_dist.mean
        _, logvar = ours.encode_moments(pixels.movedim(-1, 1) * 2 - 1)
        reference_logvar = theirs.encode(pixels.movedim(-1, 1) * 2 - 1).latent_dist.logvar
    assert mean.shape == (2, 16, 2, 3)
    torch.testing.assert_close(mean, reference, rtol=0, atol=1e-4)
    # diffusers clamps the log-variance to [-30, 20]; these values lie well inside.
    torch.testing.assert_close(logvar, reference_logvar, rtol=0, atol=1e-4)


def test_decode_matches_diffusers(ours, theirs):
    z = torch.randn(2, 16, 3, 2, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        raw = ours.decode_raw(z)
        reference = theirs.decode(z).sample
        image = ours.decode(z)
    assert raw.shape == (2, 3, 24, 16)
    torch.testing.assert_close(raw, reference, rtol=0, atol=1e-4)
    assert image.shape == (2, 24, 16, 3)
    torch.testing.assert_close(image, ((reference + 1) / 2).clamp(0, 1).movedim(1, -1), rtol=0, atol=1e-4)


def test_decode_refuses_a_4_channel_latent(ours):
    with pytest.raises(VAEConfigError, match=r"expected a latent \[B, 16, h, w\]"):
        ours.decode(torch.zeros(1, 4, 2, 2))


@pytest.mark.parametrize("layout", ["sd3", "comfy_flux", "diffusers"])
def test_every_file_layout_loads_as_the_bfl_file(tmp_path, layout):
    if layout == "diffusers":
        pytest.importorskip("diffusers")
    bfl = load_vae(write_tiny_vae16(tmp_path / "bfl", "bfl", seed=3))
    other = load_vae(write_tiny_vae16(tmp_path / layout, layout, seed=3))
    assert bfl.model.config == other.model.config == EXPECTED
    a, b = bfl.model.state_dict(), other.model.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    z = torch.randn(1, 16, 2, 3, generator=torch.Generator().manual_seed(2))
    assert torch.equal(bfl.decode(z), other.decode(z))
    assert bfl.latent_channels == 16


def test_a_state_dict_in_memory_loads_too():
    vae = vae_module_from(tiny_vae16_state_dict("sd3", seed=1))
    assert vae.config == EXPECTED and PREFIXES["sd3"] == "first_stage_model."


def test_a_temporal_decoder_builds_the_video_vae():
    """SVD's VAE has no quantisation convolutions either; it must not load as an image VAE."""
    from comfy_core.models.video_vae import VideoAutoencoder
    from tests.fixtures.checkpoints import _random_value
    from tests.fixtures.svd import svd_vae_shapes

    gen = torch.Generator().manual_seed(0)
    state = {name: _random_value(name, shape, gen) for name, shape in svd_vae_shapes("").items()}
    assert isinstance(vae_module_from(state), VideoAutoencoder)


def test_a_half_quantised_file_is_a_typed_load_error(bfl_state):
    state = {**bfl_state, "post_quant_conv.weight": torch.zeros(16, 16, 1, 1), "post_quant_conv.bias": torch.zeros(16)}
    with pytest.raises(ShapeMismatchError, match="no quant_conv"):
        vae_module_from(state)
