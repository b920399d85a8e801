"""ACE-Step 1's music VAE: the DC-AE against diffusers' AutoencoderDC (an independent
implementation) with the same weights, the Slaney mel filter bank against its formulas written out,
weight normalisation's names and value, and the patcher's layouts (ComfyUI's `comfy.sd.VAE` for
this VAE)."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.models.music_dcae import MusicDCAE, MusicDCAEConfig, MusicDCAEInputError, music_dcae_state_dict
from comfy_core.models.music_vocoder import mel_filter_bank, weight_norm_names
from tests.fixtures.ace1_files import tiny_music_vae_state_dict


@pytest.fixture(scope="module")
def vae():
    state = music_dcae_state_dict(tiny_music_vae_state_dict())
    network = MusicDCAE(MusicDCAEConfig.detect_from_weights(state)).eval()
    network.load_state_dict(state, strict=True)
    return network


def test_dcae_matches_diffusers_autoencoder_dc(vae):
    from diffusers import AutoencoderDC

    blocks = ("ResBlock", "ResBlock", "ResBlock", "EfficientViTBlock")
    reference = AutoencoderDC(
        in_channels=2, latent_channels=8, attention_head_dim=32, encoder_block_types=blocks,
        decoder_block_types=blocks, encoder_block_out_channels=(32, 32, 32, 64),
        decoder_block_out_channels=(32, 32, 32, 64), encoder_layers_per_block=(1, 1, 1, 1),
        decoder_layers_per_block=(1, 1, 1, 1), encoder_qkv_multiscales=((), (), (5,), (5,)),
        decoder_qkv_multiscales=((), (), (5,), (5,)), upsample_block_type="interpolate",
        downsample_block_type="Conv", decoder_norm_types="rms_norm", decoder_act_fns="silu").eval()
    reference.load_state_dict({k[5:]: v for k, v in vae.state_dict().items() if k.startswith("dcae.")}, strict=True)
    torch.manual_seed(0)
    mel, z = torch.randn(1, 2, 128, 16), torch.randn(1, 8, 16, 2)
    with torch.no_grad():
        torch.testing.assert_close(vae.dcae.encoder(mel), reference.encoder(mel), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(vae.dcae.decoder(z), reference.decoder(z), atol=1e-4, rtol=1e-4)


def test_mel_bank_is_slaneys_triangles():
    bank = mel_filter_bank()  # [1025, 128]
    assert bank.shape == (1025, 128) and bank.min() >= 0

    def mel(f):  # Slaney: 3 mels per 200 Hz below 1 kHz, then 27 mels per factor 6.4
        return 3 * f / 200 if f < 1000 else 15 + 27 * math.log(f / 1000) / math.log(6.4)

    def hz(m):
        return 200 * m / 3 if m < 15 else 1000 * 6.4 ** ((m - 15) / 27)

    lo, hi = mel(40.0), mel(16000.0)
    corners = [hz(lo + (hi - lo) * i / 129) for i in range(130)]
    for band in (0, 40, 127):
        left, centre, right = corners[band:band + 3]
        for index in (3, 60, 200, 700):
            f = index * 22050 / 1024
            tri = max(0.0, min((f - left) / (centre - left), (right - f) / (right - centre)))
            assert bank[index, band].item() == pytest.approx(tri * 2 / (right - left), abs=1e-9)


def test_weight_norm_names_and_value(vae):
    renamed = weight_norm_names({"head.conv_pre.weight_g": 1, "head.conv_pre.weight_v": 2, "x.weight": 3})
    assert renamed == {"head.conv_pre.parametrizations.weight.original0": 1,
                       "head.conv_pre.parametrizations.weight.original1": 2, "x.weight": 3}
    conv = vae.vocoder.head.conv_pre
    g, v = conv.parametrizations.weight.original0, conv.parametrizations.weight.original1
    torch.testing.assert_close(conv.weight, g * v / v.flatten(1).norm(dim=1)[:, None, None])


def test_patcher_layouts_and_kind(vae):
    from comfy_core.patching.music_dcae_vae import MusicDCAEVaePatcher
    from comfy_core.patching.vae import VaePatcher

    patcher = VaePatcher(sd=tiny_music_vae_state_dict())
    assert type(patcher) is MusicDCAEVaePatcher
    assert (patcher.latent_channels, patcher.latent_dim, patcher.upscale_ratio, patcher.audio_sample_rate) == \
        (8, 2, 4096, 44100)
    torch.manual_seed(1)
    audio = torch.randn(1, 5000, 2) * 0.1
    latent = patcher.encode(audio)  # padded to 8192 samples: 2 columns
    assert latent.shape == (1, 8, 16, 2)
    with torch.no_grad():
        wave = vae.decode(latent)
    decoded = patcher.decode(latent)
    assert decoded.shape == (1, 8192, 2)
    torch.testing.assert_close(decoded, wave.movedim(1, -1))
    with pytest.raises(MusicDCAEInputError):
        patcher.decode(torch.zeros(1, 4, 16, 2))


def test_vae_loader_reads_a_standalone_music_vae_file(tmp_path):
    """VAELoader's path (comfy_core.loading.load_vae) builds every VAE kind registered in
    STATE_DICT_KINDS from its own file, this one included; a file of the kind whose weights do
    not fit is a typed error naming the file."""
    from safetensors.torch import save_file

    from comfy_core.checkpoint.errors import ShapeMismatchError
    from comfy_core.loading import load_vae
    from comfy_core.patching.music_dcae_vae import MusicDCAEVaePatcher
    from comfy_core.patching.vae import VaePatcher

    state = tiny_music_vae_state_dict()
    save_file(state, tmp_path / "music_vae.safetensors")
    loaded = load_vae(tmp_path / "music_vae.safetensors")
    assert type(loaded) is MusicDCAEVaePatcher
    latent = torch.randn(1, 8, 16, 2, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(loaded.decode(latent), VaePatcher(sd=state).decode(latent))
    broken = dict(state)
    name = next(k for k in broken if k.endswith(".weight") and broken[k].ndim == 4)
    broken[name] = broken[name][:, :1].contiguous()
    save_file(broken, tmp_path / "broken.safetensors")
    with pytest.raises(ShapeMismatchError, match="broken.safetensors"):
        load_vae(tmp_path / "broken.safetensors")

