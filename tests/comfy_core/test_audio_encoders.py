"""Audio encoders (comfy_core/audio_encoders): wav2vec2 large / base and Whisper's encoder against
transformers' `Wav2Vec2Model` / `WhisperEncoder` on tiny random weights, loaded from those
models' own state dicts; the front ends (ComfyUI's batch normalisation, Whisper's log-mel, the
16 kHz resampling) and detection."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from comfy_core.audio_encoders.model import (AudioEncoderError, audio_encoder_from_state_dict, load_audio_encoder,
                                             wav2vec2_config)
from comfy_core.audio_encoders.whisper import log_mel

transformers = pytest.importorskip("transformers")

TOL = 1e-5


def _hf_wav2vec2(large: bool):
    torch.manual_seed(0)
    config = transformers.Wav2Vec2Config(
        hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48,
        conv_dim=(16,) * 7, conv_bias=large, feat_extract_norm="layer" if large else "group",
        do_stable_layer_norm=large, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        hidden_act="gelu", feat_extract_activation="gelu", hidden_dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0, apply_spec_augment=False)
    model = transformers.Wav2Vec2Model(config).eval()
    with torch.no_grad():  # non-trivial norms, biases and weight-norm gains
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias") or "original0" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("large", [True, False], ids=["large", "base"])
def test_wav2vec2_equals_transformers(large):
    hf = _hf_wav2vec2(large)
    sd = {f"wav2vec2.{k}": v for k, v in hf.state_dict().items()}  # a CTC file's spelling
    ours = audio_encoder_from_state_dict(sd)
    c = ours.config
    assert (ours.kind, c.embed_dim, c.num_layers, c.conv_dim, c.pos_kernel, c.pos_groups, c.ff_dim) == \
        ("wav2vec2", 128, 2, 16, 16, 4, 48)
    assert (c.conv_layer_norm, c.conv_bias, c.stable_layer_norm, c.normalize) == (large,) * 4
    torch.manual_seed(1)
    audio = torch.randn(2, 2, 1600)                   # [B, C, S] at 16 kHz: 4 frames
    out = ours.encode_audio(audio, 16000)
    x = audio.mean(dim=1)
    if large:  # ComfyUI's normalisation: over the whole batch, unbiased variance
        x = (x - x.mean()) / torch.sqrt(x.var() + 1e-7)
    with torch.no_grad():
        ref = hf(x, output_hidden_states=True)
    assert out["audio_samples"] == 1600
    assert out["encoded_audio"].shape == (2, 4, 128)
    torch.testing.assert_close(out["encoded_audio"], ref.last_hidden_state, atol=TOL, rtol=TOL)
    # every layer's input, then the final output (after the final norm, as transformers 4's
    # `hidden_states` and ComfyUI end; transformers 5 records the last layer's output unnormed)
    states = out["encoded_audio_all_layers"]
    assert len(states) == len(ref.hidden_states) == 3
    for a, b in zip(states[:-1], ref.hidden_states[:-1]):
        torch.testing.assert_close(a, b, atol=TOL, rtol=TOL)
    torch.testing.assert_close(states[-1], ref.last_hidden_state, atol=TOL, rtol=TOL)


def test_wav2vec2_normalises_over_the_batch_as_comfyui():
    hf = _hf_wav2vec2(True)
    ours = audio_encoder_from_state_dict(hf.state_dict())
    torch.manual_seed(2)
    audio = torch.randn(2, 1, 800)
    audio[1] *= 5.0  # per-clip normalisation would give another result for the first clip
    alone = ours.encode_audio(audio[:1], 16000)["encoded_audio"]
    both = ours.encode_audio(audio, 16000)["encoded_audio"][:1]
    assert not torch.allclose(alone, both, atol=1e-3)


def test_wav2vec2_old_weight_norm_names_load():
    hf = _hf_wav2vec2(False)
    sd = dict(hf.state_dict())
    stem = "encoder.pos_conv_embed.conv.parametrizations.weight."
    sd["encoder.pos_conv_embed.conv.weight_g"] = sd.pop(stem + "original0")
    sd["encoder.pos_conv_embed.conv.weight_v"] = sd.pop(stem + "original1")
    audio = torch.randn(1, 1, 800)
    a = audio_encoder_from_state_dict(sd).encode_audio(audio, 16000)["encoded_audio"]
    b = audio_encoder_from_state_dict(hf.state_dict()).encode_audio(audio, 16000)["encoded_audio"]
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_resampled_to_16khz_with_torchaudio_s_sinc_filter():
    hf = _hf_wav2vec2(False)
    ours = audio_encoder_from_state_dict(hf.state_dict())
    t = torch.arange(2400) / 24000
    audio = torch.sin(2 * math.pi * 440 * t)[None, None]      # 0.1 s at 24 kHz
    out = ours.encode_audio(audio, 24000)
    assert out["audio_samples"] == 1600
    # torchaudio's kernel (lowpass width 6, rolloff 0.99, Hann window) keeps a 440 Hz tone: compare
    # with the tone sampled at 16 kHz away from the edges.
    from comfy_core.models.ltx_audio_vae import sinc_resample
    y = sinc_resample(audio, 24000, 16000)[0, 0]
    want = torch.sin(2 * math.pi * 440 * torch.arange(1600) / 16000)
    assert (y[100:-100] - want[100:-100]).abs().max() < 2e-3
    with torch.no_grad():
        ref = hf(y[None]).last_hidden_state
    torch.testing.assert_close(out["encoded_audio"], ref, atol=TOL, rtol=TOL)


def _hf_whisper():
    torch.manual_seed(3)
    config = transformers.WhisperConfig(num_mel_bins=8, d_model=128, encoder_layers=2, encoder_attention_heads=2,
                                        encoder_ffn_dim=48, max_source_positions=6, dropout=0.0,
                                        attention_dropout=0.0, activation_dropout=0.0,
                                        activation_function="gelu", decoder_layers=1, decoder_attention_heads=2,
                                        decoder_ffn_dim=16, max_target_positions=8, vocab_size=50,
                                        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    model = transformers.WhisperModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def test_whisper_equals_transformers():
    hf = _hf_whisper()
    sd = {f"model.{k}": v for k, v in hf.state_dict().items()}  # decoder included, as a full file
    ours = audio_encoder_from_state_dict(sd)
    c = ours.config
    assert (ours.kind, c.n_mels, c.n_ctx, c.width, c.layers, c.ff_dim, c.window_samples) == \
        ("whisper3", 8, 6, 128, 2, 48, 1920)
    torch.manual_seed(4)
    audio = torch.randn(1, 2, 1500) * 0.3   # shorter than the window: padded
    out = ours.encode_audio(audio, 16000)
    mel = log_mel(audio, 8, 1920)
    assert mel.shape == (1, 8, 12)
    with torch.no_grad():
        ref = hf.encoder(mel, output_hidden_states=True)
    torch.testing.assert_close(out["encoded_audio"], ref.last_hidden_state, atol=TOL, rtol=TOL)
    assert len(out["encoded_audio_all_layers"]) == 3
    for a, b in zip(out["encoded_audio_all_layers"][:-1], ref.hidden_states[:-1]):
        torch.testing.assert_close(a, b, atol=TOL, rtol=TOL)
    torch.testing.assert_close(out["encoded_audio_all_layers"][-1], ref.last_hidden_state, atol=TOL, rtol=TOL)


def test_whisper_log_mel_equals_transformers_feature_extractor():
    extractor = transformers.WhisperFeatureExtractor(feature_size=16, sampling_rate=16000, hop_length=160,
                                                     chunk_length=1, n_fft=400)
    torch.manual_seed(5)
    audio = torch.randn(1, 1, 9000) * 0.2
    want = extractor(audio[0, 0].numpy().astype(np.float32), sampling_rate=16000, return_tensors="np")
    ours = log_mel(audio, 16, 16000)
    assert ours.shape == (1, 16, 100)
    np.testing.assert_allclose(ours.numpy(), want["input_features"], atol=1e-4, rtol=1e-4)


def test_whisper_clamps_by_the_batch_maximum():
    torch.manual_seed(6)
    quiet, loud = torch.randn(1, 1, 3200) * 1e-4, torch.randn(1, 1, 3200)
    alone = log_mel(quiet, 8, 3200)
    both = log_mel(torch.cat([quiet, loud]), 8, 3200)[:1]
    assert not torch.allclose(alone, both)
    assert both.min() >= both.max() - 2.0 - 1e-6  # (max - 8 + 4) / 4 = max / 4 ... floor 2 below the batch max


def test_detection_and_errors(tmp_path):
    hf = _hf_wav2vec2(True)
    sd = {k: v.half() for k, v in hf.state_dict().items()}
    path = tmp_path / "wav2vec2_tiny.safetensors"
    save_file(sd, str(path))
    model = load_audio_encoder(path, dtype=torch.float16)
    assert model.dtype == torch.float16 and model.kind == "wav2vec2"
    assert wav2vec2_config(sd).num_heads == 2  # heads are not in the shapes: 64 wide unless a known width
    broken = dict(sd)
    broken.pop("encoder.layers.1.attention.q_proj.weight")
    with pytest.raises(AudioEncoderError, match="missing.*layers.1.attention.q_proj"):
        audio_encoder_from_state_dict(broken, "tiny")
    with pytest.raises(AudioEncoderError, match="not an audio encoder"):
        audio_encoder_from_state_dict({"x.weight": torch.zeros(1)})
    with pytest.raises(AudioEncoderError, match="float waveform"):
        model.encode_audio(torch.zeros(1, 100), 16000)
    with pytest.raises(AudioEncoderError, match="sample_rate"):
        model.encode_audio(torch.zeros(1, 1, 100), 0)
    garbage = tmp_path / "bad.safetensors"
    garbage.write_bytes(b"nope")
    with pytest.raises(AudioEncoderError, match="not a readable weight file"):
        load_audio_encoder(garbage)


@pytest.mark.parametrize("kind", ["wav2vec2", "whisper"])
def test_fp16_storage_computes_in_float32(kind):
    sd = (_hf_wav2vec2(True) if kind == "wav2vec2" else _hf_whisper()).state_dict()
    sd = {(k if kind == "wav2vec2" else f"model.{k}"): v.half() for k, v in sd.items()}
    half = audio_encoder_from_state_dict(sd, dtype=torch.float16)
    full = audio_encoder_from_state_dict({k: v.float() for k, v in sd.items()})
    assert half.dtype == torch.float16
    audio = torch.randn(1, 1, 1600)
    a, b = half.encode_audio(audio, 16000), full.encode_audio(audio, 16000)
    assert a["encoded_audio"].dtype == torch.float32
    torch.testing.assert_close(a["encoded_audio"], b["encoded_audio"], atol=TOL, rtol=TOL)
