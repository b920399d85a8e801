"""ComfyUI's audio editing nodes (nodes/audio_edit.py): trimming, splitting, joining, mixing,
volume and silence on AUDIO dicts, with the expected samples worked out from the behaviour."""
from __future__ import annotations

import math

import pytest
import torch

from nodes.audio_edit import (audio_adjust_volume, audio_concat, audio_merge, empty_audio, split_audio_channels,
                              trim_audio_duration)
from nodes.errors import NodeInputError


def ramp(channels: int = 2, samples: int = 100, rate: int = 10, batch: int = 1) -> dict:
    values = torch.arange(batch * channels * samples, dtype=torch.float32).reshape(batch, channels, samples) / 1000
    return {"waveform": values, "sample_rate": rate}


def test_trim_takes_the_given_seconds_and_counts_negative_starts_from_the_end():
    audio = ramp(samples=100, rate=10)  # 10 s
    (out,) = trim_audio_duration(audio, 2.0, 3.0)
    assert torch.equal(out["waveform"], audio["waveform"][..., 20:50]) and out["sample_rate"] == 10
    (tail,) = trim_audio_duration(audio, -1.5, 60.0)  # the last 1.5 s; the duration is clamped
    assert torch.equal(tail["waveform"], audio["waveform"][..., 85:])
    with pytest.raises(NodeInputError, match="duration"):
        trim_audio_duration(audio, 2.0, 0.0)


def test_split_gives_the_left_and_right_channels_and_refuses_mono():
    audio = ramp(channels=2)
    left, right = split_audio_channels(audio)
    assert torch.equal(left["waveform"], audio["waveform"][:, :1]) and torch.equal(right["waveform"], audio["waveform"][:, 1:])
    with pytest.raises(NodeInputError, match="stereo"):
        split_audio_channels(ramp(channels=1))


def test_concat_puts_audio2_after_or_before_and_makes_mono_stereo():
    first, second = ramp(channels=1, samples=4), ramp(channels=2, samples=3)
    (after,) = audio_concat(first, second, "after")
    assert after["waveform"].shape == (1, 2, 7)
    assert torch.equal(after["waveform"][:, :, :4], first["waveform"].repeat(1, 2, 1))
    assert torch.equal(after["waveform"][:, :, 4:], second["waveform"])
    (before,) = audio_concat(first, second, "before")
    assert torch.equal(before["waveform"][:, :, :3], second["waveform"])


def test_joining_clips_of_two_rates_resamples_to_the_higher_one():
    rate_low, rate_high = 8000, 16000
    t_low = torch.arange(800) / rate_low
    t_high = torch.arange(1600) / rate_high
    tone_low = {"waveform": (0.5 * torch.sin(2 * math.pi * 440 * t_low)).reshape(1, 1, -1), "sample_rate": rate_low}
    tone_high = {"waveform": (0.5 * torch.sin(2 * math.pi * 440 * t_high)).reshape(1, 1, -1), "sample_rate": rate_high}
    (joined,) = audio_concat(tone_high, tone_low, "after")
    assert joined["sample_rate"] == rate_high
    assert abs(joined["waveform"].shape[-1] - 3200) <= 64  # 0.1 s + 0.1 s at 16 kHz (resampler delay aside)
    (mixed,) = audio_merge(tone_high, tone_low, "subtract")  # the same tone at both rates cancels out
    assert mixed["sample_rate"] == rate_high and mixed["waveform"].shape[-1] == 1600
    middle = mixed["waveform"][..., 200:1400]
    assert middle.abs().max() < 0.1 * tone_high["waveform"].abs().max()


def test_merge_pads_or_trims_audio2_and_rescales_overflow():
    first = {"waveform": torch.full((1, 1, 4), 0.75), "sample_rate": 10}
    short = {"waveform": torch.full((1, 1, 2), 0.75), "sample_rate": 10}
    (added,) = audio_merge(first, short, "add")
    # 1.5, 1.5, 0.75, 0.75 peaks above 1: scaled by the peak, as ComfyUI
    assert torch.allclose(added["waveform"], torch.tensor([[[1.0, 1.0, 0.5, 0.5]]]))
    (mean,) = audio_merge(first, short, "mean")
    assert torch.allclose(mean["waveform"], torch.tensor([[[0.75, 0.75, 0.375, 0.375]]]))
    long = {"waveform": torch.full((1, 1, 9), 0.5), "sample_rate": 10}
    (product,) = audio_merge(first, long, "multiply")
    assert product["waveform"].shape[-1] == 4 and torch.allclose(product["waveform"], torch.full((1, 1, 4), 0.375))


def test_volume_is_in_decibels_and_zero_returns_the_input():
    audio = ramp()
    assert audio_adjust_volume(audio, 0)[0] is audio
    (louder,) = audio_adjust_volume(audio, 20)
    assert torch.allclose(louder["waveform"], audio["waveform"] * 10.0)


def test_empty_audio_is_silence_of_the_asked_length():
    (out,) = empty_audio(1.5, 8000, 1)
    assert out["sample_rate"] == 8000 and out["waveform"].shape == (1, 1, 12000) and not out["waveform"].any()
    with pytest.raises(NodeInputError, match="sample_rate"):
        empty_audio(1.0, 0, 2)


def test_not_an_audio_dict_is_a_clear_error():
    with pytest.raises(NodeInputError, match="audio"):
        trim_audio_duration({"samples": torch.zeros(1)}, 0.0, 1.0)
