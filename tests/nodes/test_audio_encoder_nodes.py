"""AudioEncoderLoader and AudioEncoderEncode (nodes/audio_encoder.py) on tiny files of the
`audio_encoders` folder (tests/fixtures/audio_encoder_files.py): the folder listed, each kind
loaded in the text-encoder dtype, the output dict Wan's audio nodes read, and the refusals."""
from __future__ import annotations

import pytest
import torch

from comfy_core.audio_encoders.model import audio_encoder_from_state_dict
from nodes.audio_encoder import _encoder_files, audio_encoder_encode, audio_encoder_loader
from nodes.environment import Environment
from nodes.errors import NodeInputError
from tests.fixtures.audio_encoder_files import tiny_wav2vec2_state_dict, write_tiny_audio_encoder
from tests.nodes.node_context import folders_env, running_node

FILES = {"wav2vec2_large_english_fp16.safetensors": "wav2vec2_large",
         "wav2vec2-chinese-base_fp16.safetensors": "wav2vec2_base",
         "whisper_large_v3_fp16.safetensors": "whisper"}


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Environment:
    root = tmp_path_factory.mktemp("audio_encoders")
    environment = folders_env(root)
    folder = root / "base" / "models" / "audio_encoders"
    for name, kind in FILES.items():
        write_tiny_audio_encoder(folder / name, kind)
    (folder / "broken.safetensors").write_bytes(b"not a file")
    return environment


def _load(env, name):
    with running_node("AudioEncoderLoader", "1", env):
        (encoder,) = audio_encoder_loader(name)
    return encoder


def _encode(env, encoder, audio):
    with running_node("AudioEncoderEncode", "2", env):
        (out,) = audio_encoder_encode(encoder, audio)
    return out


def test_loads_each_kind_and_encodes(env):
    assert _encoder_files(env) == sorted([*FILES, "broken.safetensors"])
    audio = {"waveform": torch.randn(1, 2, 4800, generator=torch.Generator().manual_seed(1)), "sample_rate": 48000}
    for name, kind in FILES.items():
        encoder = _load(env, name)
        assert encoder.kind == ("whisper3" if kind == "whisper" else "wav2vec2")
        out = _encode(env, encoder, audio)
        assert set(out) == {"encoded_audio", "encoded_audio_all_layers", "audio_samples"}
        assert out["audio_samples"] == 1600   # 0.1 s resampled to 16 kHz
        frames = 8 if kind == "whisper" else 4
        assert out["encoded_audio"].shape == (1, frames, 128)
        assert len(out["encoded_audio_all_layers"]) == 3


def test_the_encoding_is_the_encoder_s_on_the_resampled_audio(env):
    encoder = _load(env, "wav2vec2_large_english_fp16.safetensors")
    waveform = torch.randn(1, 1, 1600, generator=torch.Generator().manual_seed(2))
    out = _encode(env, encoder, {"waveform": waveform, "sample_rate": 16000})
    direct = audio_encoder_from_state_dict(tiny_wav2vec2_state_dict(True), dtype=torch.float16)
    torch.testing.assert_close(out["encoded_audio"], direct.encode_audio(waveform, 16000)["encoded_audio"])


def test_refusals(env):
    with pytest.raises(NodeInputError, match="audio_encoder_name"):
        _load(env, "missing.safetensors")
    with pytest.raises(NodeInputError, match="not a readable weight file"):
        _load(env, "broken.safetensors")
    encoder = _load(env, "wav2vec2-chinese-base_fp16.safetensors")
    with pytest.raises(NodeInputError, match="AUDIO"):
        _encode(env, encoder, {"waveform": torch.zeros(2, 100), "sample_rate": 16000})
    with pytest.raises(NodeInputError, match="AUDIO_ENCODER"):
        _encode(env, object(), {"waveform": torch.zeros(1, 1, 100), "sample_rate": 16000})
