"""LTX-2's audio VAE and vocoders (comfy_core/models/ltx_audio_vae.py, ltx_vocoder.py) on tiny random
files with ComfyUI's key names (tests/fixtures/ltx_audio_files.py): the networks against diffusers'
`AutoencoderKLLTX2Audio`, `LTX2Vocoder`, `LTX2VocoderWithBWE` (within 1e-4), the front end
(resampling, STFT, Slaney mel) and the latent statistics against independent re-computations."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from comfy_core.models.ltx_audio_vae import (AudioVAEConfigError, AudioVAEInputError, LTXAudioVAE, is_ltx_audio_vae,
                                             load_ltx_audio_vae, log_mel, ltx_audio_vae_from_state_dict,
                                             mel_filterbank, sinc_resample)
from comfy_core.models.ltx_vocoder import VocoderConfigError, Vocoder
from tests.fixtures import ltx_audio_files as fx

diffusers = pytest.importorskip("diffusers")
from diffusers.models.autoencoders.autoencoder_kl_ltx2_audio import AutoencoderKLLTX2Audio  # noqa: E402
from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder, LTX2VocoderWithBWE  # noqa: E402

TOL = 1e-4


def _ours(attention: bool = False, bwe: bool = False) -> LTXAudioVAE:
    return ltx_audio_vae_from_state_dict(fx.tiny_audio_state_dict(attention, bwe), fx.metadata(attention, bwe))


def _reference_autoencoder(attention: bool) -> AutoencoderKLLTX2Audio:
    ref = AutoencoderKLLTX2Audio(**fx.diffusers_autoencoder_kwargs(attention)).eval()
    ref.load_state_dict(fx.to_diffusers_autoencoder(fx.tiny_audio_state_dict(attention)), strict=True)
    return ref


def _reference_vocoder(bwe: bool) -> torch.nn.Module:
    ref = (LTX2VocoderWithBWE if bwe else LTX2Vocoder)(**fx.diffusers_vocoder_kwargs(bwe)).eval()
    missing, unexpected = ref.load_state_dict(fx.to_diffusers_vocoder(fx.tiny_audio_state_dict(bwe=bwe), bwe),
                                              strict=False)
    assert not unexpected and all(k.endswith(".filter") for k in missing)  # only the computed filters
    return ref


@pytest.mark.parametrize("attention", [False, True])
def test_encoder_and_decoder_match_diffusers(attention):
    ours, ref = _ours(attention), _reference_autoencoder(attention)
    mel = torch.randn(2, 2, 21, fx.MELS, generator=torch.Generator().manual_seed(1))
    latent = torch.randn(2, fx.Z, 6, fx.MELS // 4, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        moments, expected_moments = ours.autoencoder.encoder(mel), ref.encoder(mel)
        decoded = ours.autoencoder.decoder(latent, ours.decoded_frames(6), fx.MELS)
        expected = ref.decoder(latent)
    assert moments.shape == (2, 2 * fx.Z, 6, fx.MELS // 4)
    assert (moments - expected_moments).abs().max() <= TOL
    assert decoded.shape == expected.shape == (2, 2, 4 * 6 - 3, fx.MELS)  # causal: 4 T - 3 frames
    assert (decoded - expected).abs().max() <= TOL


@pytest.mark.parametrize("bwe", [False, True])
def test_vocoders_match_diffusers(bwe):
    ours, ref = _ours(bwe=bwe), _reference_vocoder(bwe)
    mel = torch.randn(1, 2, 13, fx.MELS, generator=torch.Generator().manual_seed(3))  # [B, C, frames, mels]
    with torch.no_grad():
        wave, expected = ours.run_vocoder(mel), ref(mel)
    assert wave.shape == expected.shape == (1, 2, 13 * fx.HOP)  # 16 kHz either way: 160 samples a frame
    assert (wave - expected).abs().max() <= TOL
    assert ours.output_sample_rate == 16000


def test_bwe_vocoder_with_bfloat16_weights_runs_in_float32():
    ours = _ours(bwe=True)
    mel = torch.randn(1, 2, 7, fx.MELS, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = ours.run_vocoder(mel)
        ours.vocoder.to(torch.bfloat16)
        stored = ours.run_vocoder(mel.bfloat16())
    assert stored.dtype == torch.bfloat16
    # only the weights' bf16 rounding differs (a bf16 chain would drift much further)
    assert (stored.float() - full).abs().max() < 0.05


def test_sinc_resample_matches_a_direct_bandlimited_interpolation():
    x = torch.randn(2, 1, 300, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    for rate, target in ((16000, 44100), (44100, 16000), (8000, 12000)):
        ours = sinc_resample(x, rate, target)
        g = math.gcd(rate, target)
        orig, new = rate // g, target // g
        cutoff = min(orig, new) * 0.99
        width = math.ceil(6 * orig / cutoff)
        n_out = math.ceil(300 * new / orig)
        assert ours.shape == (2, 1, n_out)
        xs = x.numpy()[:, 0]
        expected = np.zeros((2, n_out))
        for n in range(n_out):
            # output n sits at input time n * orig / new; taps reach `width` samples either side
            block, phase = divmod(n, new)
            centre = block * orig
            for k in range(centre - width, centre + width + orig):
                if not 0 <= k < 300:
                    continue
                t = (k - centre) / orig - phase / new
                t = min(max(t * cutoff, -6.0), 6.0)
                window = math.cos(t * math.pi / 12) ** 2
                sinc = 1.0 if t == 0 else math.sin(math.pi * t) / (math.pi * t)
                expected[:, n] += xs[:, k] * sinc * window * cutoff / orig
        assert np.abs(ours.numpy()[:, 0] - expected).max() < 1e-9
    assert sinc_resample(x, 16000, 16000) is x
    with pytest.raises(AudioVAEInputError):
        sinc_resample(x, 0, 16000)


def test_slaney_filterbank_matches_triangles_built_filter_by_filter():
    sr, n_fft, mels = 16000, 64, 10
    ours = mel_filterbank(sr, n_fft, mels, 0.0, sr / 2.0).double().numpy()

    def hz_to_mel(f):
        return f / (200 / 3) if f < 1000 else 15 + math.log(f / 1000) * 27 / math.log(6.4)

    def mel_to_hz(m):
        return m * 200 / 3 if m < 15 else 1000 * math.exp((m - 15) * math.log(6.4) / 27)

    edges = [mel_to_hz(m) for m in np.linspace(hz_to_mel(0), hz_to_mel(sr / 2), mels + 2)]
    bins = np.linspace(0, sr // 2, n_fft // 2 + 1)
    expected = np.zeros((n_fft // 2 + 1, mels))
    for j in range(mels):
        lo, mid, hi = edges[j], edges[j + 1], edges[j + 2]
        for i, f in enumerate(bins):
            up = (f - lo) / (mid - lo)
            down = (hi - f) / (hi - mid)
            expected[i, j] = max(0.0, min(up, down)) * 2.0 / (hi - lo)  # area normalised (Slaney)
    assert np.abs(ours - expected).max() < 1e-6


def test_log_mel_is_a_centred_hann_stft_magnitude_through_the_filterbank():
    sr, n_fft, hop, mels = 16000, 64, 16, 8
    x = torch.randn(1, 2, 200, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    ours = log_mel(x, sr, n_fft, hop, mels)
    frames = 200 // hop + 1
    assert ours.shape == (1, 2, frames, mels)
    padded = np.pad(x.numpy(), ((0, 0), (0, 0), (n_fft // 2, n_fft // 2)), mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann
    spec = np.stack([np.abs(np.fft.rfft(padded[..., f * hop:f * hop + n_fft] * window)) for f in range(frames)], -2)
    bank = mel_filterbank(sr, n_fft, mels, 0.0, sr / 2.0).double().numpy()
    expected = np.log(np.maximum(spec @ bank, 1e-5))
    assert np.abs(ours.numpy() - expected).max() < 1e-9


def test_latent_statistics_normalise_each_channel_frequency_slot():
    model = _ours()
    stats = model.autoencoder.per_channel_statistics
    mean, std = stats.get_buffer("mean-of-means"), stats.get_buffer("std-of-means")
    latent = torch.randn(2, fx.Z, 5, fx.MELS // 4, generator=torch.Generator().manual_seed(7))
    normalised = stats.normalize(latent)
    c, f = 3, 11  # slot c * F + f of the flattened (channel, frequency) axis
    slot = c * (fx.MELS // 4) + f
    assert torch.allclose(normalised[:, c, :, f], (latent[:, c, :, f] - mean[slot]) / std[slot])
    assert torch.allclose(stats.un_normalize(normalised), latent, atol=1e-6)
    with pytest.raises(AudioVAEInputError, match="statistics"):
        stats.normalize(torch.zeros(1, 4, 5, 16))


def test_encode_is_resample_mel_encoder_mean_and_normalise():
    model, ref = _ours(), _reference_autoencoder(False)
    wave = 0.3 * torch.randn(1, 2, 4410, generator=torch.Generator().manual_seed(8))  # 0.1 s at 44.1 kHz
    with torch.no_grad():
        latent = model.encode(wave, 44100)
        mel = log_mel(sinc_resample(wave, 44100, fx.SAMPLE_RATE), fx.SAMPLE_RATE, fx.N_FFT, fx.HOP, fx.MELS)
        mode = ref.encode(mel).latent_dist.mode()
    stats = model.autoencoder.per_channel_statistics
    expected = stats.normalize(mode)
    assert latent.shape == (1, fx.Z, math.ceil((1600 // fx.HOP + 1) / 4), fx.MELS // 4)
    assert (latent - expected).abs().max() <= TOL
    mono = model.encode(wave[:, :1], 44100)  # mono is copied to both input channels
    assert torch.allclose(mono, model.encode(wave[:, :1].expand(-1, 2, -1), 44100))
    with pytest.raises(AudioVAEInputError, match="channels"):
        model.encode(torch.zeros(1, 3, 100), 16000)


def test_decode_gives_the_causal_length_at_the_vocoders_rate():
    model = _ours()
    latent = torch.randn(1, fx.Z, 7, fx.MELS // 4, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        wave = model.decode(latent)
    assert wave.shape == (1, 2, (4 * 7 - 3) * fx.HOP)
    assert model.latents_per_second == 25.0 and model.num_of_latents_from_frames(97, 25.0) == 97
    assert model.latent_channels == fx.Z and model.latent_frequency_bins == 16
    with pytest.raises(AudioVAEInputError, match="latent"):
        model.decode(torch.zeros(1, 3, 7, 16))


def test_file_loading_detection_and_errors(tmp_path):
    path = fx.write_ltx_audio_vae(tmp_path / "audio.safetensors", bwe=True)
    model = load_ltx_audio_vae(path)
    assert type(model.vocoder).__name__ == "VocoderWithBWE"
    state = fx.tiny_audio_state_dict()
    assert is_ltx_audio_vae(state) and not is_ltx_audio_vae({"encoder.conv_in.weight": 0})
    with pytest.raises(AudioVAEConfigError, match="config"):
        ltx_audio_vae_from_state_dict(state, {})
    with pytest.raises(AudioVAEConfigError, match="vocoder"):
        ltx_audio_vae_from_state_dict(state, {"config": json.dumps({"audio_vae": fx.audio_vae_config()})})
    short = {k: v for k, v in state.items() if "conv_post" not in k}
    with pytest.raises(AudioVAEConfigError, match="lacks"):
        ltx_audio_vae_from_state_dict(short, fx.metadata())
    bad = dict(state)
    bad["audio_vae.encoder.conv_in.conv.weight"] = torch.zeros(3, 3, 3, 3)
    with pytest.raises(AudioVAEConfigError, match="shape"):
        ltx_audio_vae_from_state_dict(bad, fx.metadata())
    other = tmp_path / "other.safetensors"
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(1)}, str(other))
    with pytest.raises(AudioVAEConfigError, match="vocoder"):
        load_ltx_audio_vae(other)
    with pytest.raises(VocoderConfigError, match="resblock"):
        Vocoder({"resblock": "3"})
