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
