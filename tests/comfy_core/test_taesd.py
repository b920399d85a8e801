"""The TAESD decoder (comfy_core/models/taesd.py) against diffusers' `AutoencoderTiny`, an
independent implementation, on the same random weights; loading the published file layout."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.models.taesd import TAESDDecoder, TAESDError, load_taesd_decoder


def random_decoder(width: int = 8, latent_channels: int = 4, seed: int = 0) -> TAESDDecoder:
    torch.manual_seed(seed)
    decoder = TAESDDecoder(latent_channels=latent_channels, width=width)
    with torch.no_grad():
        for p in decoder.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return decoder.eval()


def to_diffusers(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """TAESD's Sequential index N (after the clamp at 0) is diffusers' `layers.{N-1}`."""
    out = {}
    for key, value in state.items():
        index, rest = key.split(".", 1)
        out[f"layers.{int(index) - 1}.{rest}"] = value
    return out


@pytest.mark.parametrize("latent_channels", [4, 16])
def test_decode_matches_diffusers_autoencoder_tiny(latent_channels):
    from diffusers import AutoencoderTiny

    ours = random_decoder(width=8, latent_channels=latent_channels)
    theirs = AutoencoderTiny(latent_channels=latent_channels, decoder_block_out_channels=(8, 8, 8, 8),
                             encoder_block_out_channels=(8, 8, 8, 8)).decoder.eval()
    theirs.load_state_dict(to_diffusers(ours.state_dict()), strict=True)
    latent = torch.randn(2, latent_channels, 5, 7) * 2
    with torch.no_grad():
        mine, reference = ours.decode(latent), theirs(latent)
    assert mine.shape == (2, 3, 40, 56)
    torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-5)


def test_state_dict_has_the_published_key_names():
    keys = set(TAESDDecoder().state_dict())
    assert len(keys) == 67
    assert {"1.weight", "1.bias", "3.conv.0.weight", "3.conv.4.bias", "7.weight", "12.weight", "17.weight",
            "18.conv.2.weight", "19.weight", "19.bias"} <= keys
    assert not {"7.bias", "0.weight", "3.skip.weight"} & keys
    assert TAESDDecoder().state_dict()["1.weight"].shape == (64, 4, 3, 3)


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_load_reads_the_file_layout_and_its_sizes(tmp_path, suffix):
    source = random_decoder(width=64, latent_channels=4, seed=3)
    path = tmp_path / f"taesd_decoder{suffix}"
    state = {k: v.to(torch.float16) for k, v in source.state_dict().items()}  # published files may be fp16
    save_file(state, str(path)) if suffix == ".safetensors" else torch.save(state, path)
    loaded = load_taesd_decoder(path)
    assert loaded.width == 64 and loaded.latent_channels == 4
    assert next(loaded.parameters()).dtype == torch.float32
    latent = torch.randn(1, 4, 4, 4)
    with torch.no_grad():
        expected = source.half().float().decode(latent)
        torch.testing.assert_close(loaded.decode(latent), expected)


def test_a_file_that_is_not_a_taesd_decoder_is_refused_with_its_name(tmp_path):
    path = tmp_path / "taesd_decoder.safetensors"
    save_file({"encoder.weight": torch.zeros(2, 2)}, str(path))
    with pytest.raises(TAESDError, match="taesd_decoder.safetensors"):
        load_taesd_decoder(path)
    state = dict(random_decoder().state_dict())
    del state["19.bias"]
    save_file(state, str(path))
    with pytest.raises(TAESDError, match="layout"):
        load_taesd_decoder(path)


def test_encoder_matches_diffusers_autoencoder_tiny_and_the_pair_round_trips(tmp_path):
    # Packs build ComfyUI's `TAESD(encoder_path, decoder_path, latent_channels)` (ComfyUI-bleh).
    from diffusers import AutoencoderTiny

    from comfy_core.models.taesd import TAESD, TAESDEncoder

    torch.manual_seed(1)
    ours = TAESDEncoder(latent_channels=4, width=8).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    theirs = AutoencoderTiny(latent_channels=4, decoder_block_out_channels=(8, 8, 8, 8),
                             encoder_block_out_channels=(8, 8, 8, 8)).encoder.eval()
    theirs.load_state_dict({f"layers.{k}": v for k, v in ours.state_dict().items()}, strict=True)
    image = torch.rand(1, 3, 32, 48)  # in [0, 1]
    with torch.no_grad():
        torch.testing.assert_close(ours(image), theirs(image * 2 - 1), rtol=1e-5, atol=1e-5)  # diffusers takes [-1, 1]
    assert {"0.weight", "1.conv.0.weight", "2.weight", "14.weight"} <= set(TAESDEncoder().state_dict())
    assert "2.bias" not in TAESDEncoder().state_dict()  # the stride-2 convolutions have no bias

    encoder_file, decoder_file = tmp_path / "taesd_encoder.safetensors", tmp_path / "taesd_decoder.safetensors"
    save_file(TAESDEncoder().state_dict(), str(encoder_file))
    save_file(random_decoder(width=64).state_dict(), str(decoder_file))
    pair = TAESD(encoder_file, decoder_file, latent_channels=4).eval()
    with torch.no_grad():
        latent = pair.encode(torch.rand(1, 3, 16, 16) * 2 - 1)
        assert latent.shape == (1, 4, 2, 2) and pair.decode(latent).shape == (1, 3, 16, 16)
    raw = torch.randn(1, 4, 2, 2)
    torch.testing.assert_close(TAESD.unscale_latents(TAESD.scale_latents(raw)), raw.clamp(-3, 3))
