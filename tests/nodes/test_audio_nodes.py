"""LoadAudio, SaveAudio (FLAC), SaveAudioMP3, SaveAudioOpus, PreviewAudio: files per batch item
with ComfyUI's names and UI record, decoded back with PyAV (rate, channels, length, samples),
tags and --disable-metadata, the input listing (audio and video files), validation, change
detection, and the track of a video loaded as AUDIO."""
from __future__ import annotations

import json
import math
import os
from fractions import Fraction
from pathlib import Path

import av
import pytest
import torch

from comfy_core.video import UnreadableAudioError, VideoComponents, VideoFromComponents
from nodes.audio import (audio_exists, audio_hash, list_input_audio, load_audio, preview_audio, save_audio,
                         save_audio_mp3, save_audio_opus)
from nodes.environment import Environment
from nodes.errors import NodeInputError
from tests.nodes.node_context import folders_env, running_node

PROMPT = {"1": {"class_type": "LoadAudio", "inputs": {}}}
EXTRA = {"workflow": {"nodes": []}}


@pytest.fixture
def env(tmp_path: Path) -> Environment:
    return folders_env(tmp_path)


def running_in(env: Environment, class_type: str = "SaveAudio"):
    return running_node(class_type, "4", env)


def tone(batch: int = 1, channels: int = 2, rate: int = 22050, seconds: float = 0.4) -> dict:
    t = torch.arange(int(rate * seconds)) / rate
    waves = torch.stack([0.25 * torch.sin(2 * math.pi * 200 * (c + 1 + b) * t)
                         for b in range(batch) for c in range(channels)])
    return {"waveform": waves.reshape(batch, channels, -1), "sample_rate": rate}


def read(path: Path) -> tuple[torch.Tensor, int, dict]:
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        planar = av.AudioResampler(format="fltp", layout=stream.layout.name, rate=stream.sample_rate)
        parts = [torch.from_numpy(out.to_ndarray()) for f in container.decode(stream) for out in planar.resample(f)]
        parts += [torch.from_numpy(out.to_ndarray()) for out in planar.resample(None)]
        tags = {k.lower(): v for k, v in {**container.metadata, **stream.metadata}.items()}
        return torch.cat(parts, dim=1).float(), stream.sample_rate, tags


def test_save_audio_writes_one_flac_per_batch_item(env):
    audio = tone(batch=2)
    with running_in(env):
        ui = save_audio(audio, "audio/take_%batch_num%", prompt=PROMPT, extra_pnginfo=EXTRA)
    assert ui["ui"] == {"audio": [{"filename": "take_0_00001_.flac", "subfolder": "audio", "type": "output"},
                                  {"filename": "take_1_00002_.flac", "subfolder": "audio", "type": "output"}]}
    for index, record in enumerate(ui["ui"]["audio"]):
        samples, rate, tags = read(env.output_dir / "audio" / record["filename"])
        assert rate == 22050 and samples.shape == audio["waveform"][index].shape
        assert (samples - audio["waveform"][index]).abs().max() < 1e-3
        assert json.loads(tags["prompt"]) == PROMPT and json.loads(tags["workflow"]) == EXTRA["workflow"]


@pytest.mark.parametrize("node, ext, quality, rate", [(save_audio_mp3, "mp3", "V0", 22050),
                                                      (save_audio_mp3, "mp3", "128k", 22050),
                                                      (save_audio_opus, "opus", "96k", 48000)])  # Opus decodes at 48 kHz
def test_mp3_and_opus(env, node, ext, quality, rate):
    audio = tone(channels=1)
    with running_in(env):
        ui = node(audio, "audio/ComfyUI", quality)
    (record,) = ui["ui"]["audio"]
    assert record["filename"] == f"ComfyUI_00001_.{ext}"
    samples, got_rate, _ = read(env.output_dir / "audio" / record["filename"])
    expected = audio["waveform"].shape[-1] * rate // 22050
    assert got_rate == rate and samples.shape[0] == 1 and expected <= samples.shape[1] <= expected + 3000


def test_preview_audio_goes_to_temp_as_flac(env):
    with running_in(env, "PreviewAudio"):
        ui = preview_audio(tone())
    (record,) = ui["ui"]["audio"]
    assert record["type"] == "temp" and record["filename"].startswith("ComfyUI_temp_")
    assert record["filename"].endswith("_00001_.flac") and (env.temp_dir / record["filename"]).is_file()


def test_disable_metadata_drops_the_tags(env):
    env.disable_metadata = True
    with running_in(env):
        (record,) = save_audio(tone(), "a", prompt=PROMPT, extra_pnginfo=EXTRA)["ui"]["audio"]
    assert "prompt" not in read(env.output_dir / record["filename"])[2]


def test_load_audio_of_an_audio_file_and_of_a_video_track(env):
    audio = tone(rate=16000)
    with running_in(env):
        (record,) = save_audio(audio, "x")["ui"]["audio"]
    os.replace(env.output_dir / record["filename"], env.input_dir / "voice.flac")
    VideoFromComponents(VideoComponents(images=torch.rand(8, 16, 16, 3), frame_rate=Fraction(8), audio=tone(rate=16000,
                                        seconds=1.0))).save_to(env.input_dir / "clip.mp4")
    (env.input_dir / "pic.png").write_bytes(b"")
    assert list_input_audio(env) == ["clip.mp4", "voice.flac"]
    with running_in(env, "LoadAudio"):
        (loaded,) = load_audio("voice.flac")
        (track,) = load_audio("clip.mp4")
        assert audio_exists("voice.flac") is True and audio_exists("nope.wav") == "Invalid audio file: nope.wav"
        digest = audio_hash("voice.flac")
    assert loaded["sample_rate"] == 16000 and loaded["waveform"].shape == audio["waveform"].shape
    assert (loaded["waveform"] - audio["waveform"]).abs().max() < 1e-3
    assert track["sample_rate"] == 16000 and track["waveform"].shape[:2] == (1, 2) and track["waveform"].shape[2] >= 8000
    import hashlib

    assert digest == hashlib.sha256((env.input_dir / "voice.flac").read_bytes()).hexdigest()


def test_bad_audio_input_names_node_and_input(env):
    (env.input_dir / "bad.mp3").write_bytes(b"junk" * 50)
    with running_in(env, "LoadAudio"), pytest.raises(NodeInputError, match="LoadAudio \\(node 4\\).*bad.mp3") as info:
        load_audio("bad.mp3")
    assert isinstance(info.value.__cause__, UnreadableAudioError)
    with running_in(env):
        with pytest.raises(NodeInputError, match="'audio'"):
            save_audio({"waveform": torch.zeros(3, 3)}, "x")
        with pytest.raises(NodeInputError, match="'audio' expected one of \\['64k'"):
            save_audio_opus(tone(), "x", "1k")
        with pytest.raises(NodeInputError, match="1 or 2 channels"):
            save_audio({"waveform": torch.zeros(1, 5, 100), "sample_rate": 8000}, "x")
    assert not list(env.output_dir.rglob("*.*"))


def test_the_quality_choices_are_the_librarys():
    from comfy_core.video import audio_files
    from nodes.audio import MP3_QUALITIES, OPUS_QUALITIES

    assert MP3_QUALITIES == list(audio_files.MP3_QUALITIES) and OPUS_QUALITIES == list(audio_files.OPUS_QUALITIES)
