"""ComfyUI's audio editing nodes (comfy_extras/nodes_audio.py, 0.3.64): TrimAudioDuration,
SplitAudioChannels, AudioConcat, AudioMerge, AudioAdjustVolume, EmptyAudio, on ComfyUI's AUDIO
dict `{"waveform": [B, C, S] float, "sample_rate": int}`. Behaviour as ComfyUI's: two clips at
different rates are joined at the higher rate (the other resampled, comfy_core.video.audio_resample);
AudioConcat makes mono clips stereo; AudioMerge trims or zero-pads the second clip to the first's
length and scales the result back into -1..1 when it overflows. Bad input (not an AUDIO dict, a
mono clip to split, an empty trim range) is a `NodeInputError` naming the input.
"""
from __future__ import annotations

import logging
from typing import Any

from graph.native import Combo, Float, Input, Int, Output, node
from nodes._media_files import media_errors
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_audio"
SECONDS_LIMIT = 0xffffffffffffffff  # ComfyUI's unbounded FLOAT widgets
MERGE_METHODS = ["add", "mean", "subtract", "multiply"]

log = logging.getLogger(__name__)


def _audio(audio: Any, name: str) -> tuple[Any, int]:
    from comfy_core.video.audio_frames import check_audio

    with media_errors(name):
        return check_audio(audio, name)


def _same_rate(first: Any, first_rate: int, second: Any, second_rate: int) -> tuple[Any, Any, int]:
    """Both waveforms at the higher of the two rates (ComfyUI's `match_audio_sample_rates`)."""
    from comfy_core.video.audio_resample import resample

    if first_rate > second_rate:
        return first, resample(second, second_rate, first_rate), first_rate
    if second_rate > first_rate:
        return resample(first, first_rate, second_rate), second, second_rate
    return first, second, first_rate


@node("TrimAudioDuration", category="audio", display_name="Trim Audio Duration", python_module=MODULE,
      description="Trim audio tensor into chosen time range.",
      inputs=[Input("audio", "AUDIO"),
              Float("start_index", default=0.0, min=-SECONDS_LIMIT, max=SECONDS_LIMIT, step=0.01,
                    tooltip="Start time in seconds, can be negative to count from the end (supports sub-seconds)."),
              Float("duration", default=60.0, min=0.0, step=0.01, tooltip="Duration in seconds")],
      outputs=[Output("AUDIO")])
def trim_audio_duration(audio: dict, start_index: float, duration: float) -> tuple[dict]:
    """Samples from `start_index` seconds (from the end when negative) for `duration` seconds."""
    waveform, rate = _audio(audio, "audio")
    length = waveform.shape[-1]
    start = length + round(start_index * rate) if start_index < 0 else round(start_index * rate)
    start = max(0, min(start, length - 1))
    end = max(0, min(start + round(duration * rate), length))
    if start >= end:
        raise NodeInputError("duration", "a time range inside the audio with a start before its end",
                             f"start {start_index} s, duration {duration} s of a {length / rate:.3f} s clip")
    return ({"waveform": waveform[..., start:end], "sample_rate": rate},)


@node("SplitAudioChannels", category="audio", display_name="Split Audio Channels", python_module=MODULE,
      description="Separates the audio into left and right channels.",
      inputs=[Input("audio", "AUDIO")], outputs=[Output("AUDIO", "left"), Output("AUDIO", "right")])
def split_audio_channels(audio: dict) -> tuple[dict, dict]:
    waveform, rate = _audio(audio, "audio")
    if waveform.shape[1] != 2:
        raise NodeInputError("audio", "stereo audio (2 channels)", f"{waveform.shape[1]} channel(s)")
    return ({"waveform": waveform[:, 0:1], "sample_rate": rate}, {"waveform": waveform[:, 1:2], "sample_rate": rate})


@node("AudioConcat", category="audio", display_name="Audio Concat", python_module=MODULE,
      description="Concatenates the audio1 to audio2 in the specified direction.",
      inputs=[Input("audio1", "AUDIO"), Input("audio2", "AUDIO"),
              Combo("direction", ["after", "before"], default="after",
                    tooltip="Whether to append audio2 after or before audio1.")],
      outputs=[Output("AUDIO")])
def audio_concat(audio1: dict, audio2: dict, direction: str) -> tuple[dict]:
    """audio2 after (or before) audio1 in time; mono clips become stereo first, as ComfyUI."""
    import torch

    first, first_rate = _audio(audio1, "audio1")
    second, second_rate = _audio(audio2, "audio2")
    first = first.repeat(1, 2, 1) if first.shape[1] == 1 else first
    second = second.repeat(1, 2, 1) if second.shape[1] == 1 else second
    first, second, rate = _same_rate(first, first_rate, second, second_rate)
    if first.shape[0] != second.shape[0]:
        raise NodeInputError("audio2", f"a batch of {first.shape[0]} clip(s), as audio1", f"{second.shape[0]}")
    parts = (first, second) if direction == "after" else (second, first)
    return ({"waveform": torch.cat(parts, dim=2), "sample_rate": rate},)


@node("AudioMerge", category="audio", display_name="Audio Merge", python_module=MODULE,
      description="Combine two audio tracks by overlaying their waveforms.",
      inputs=[Input("audio1", "AUDIO"), Input("audio2", "AUDIO"),
              Combo("merge_method", MERGE_METHODS, tooltip="The method used to combine the audio waveforms.")],
      outputs=[Output("AUDIO")])
def audio_merge(audio1: dict, audio2: dict, merge_method: str) -> tuple[dict]:
    """audio1 (+, -, x, mean) audio2, over audio1's length; rescaled into -1..1 if it overflows."""
    import torch

    first, first_rate = _audio(audio1, "audio1")
    second, second_rate = _audio(audio2, "audio2")
    first, second, rate = _same_rate(first, first_rate, second, second_rate)
    length = first.shape[-1]
    if second.shape[-1] > length:
        second = second[..., :length]
    elif second.shape[-1] < length:
        pad = second.new_zeros((*second.shape[:-1], length - second.shape[-1]))
        second = torch.cat((second, pad), dim=-1)
    ops = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
           "mean": lambda a, b: (a + b) / 2}
    if merge_method not in ops:
        raise NodeInputError("merge_method", f"one of {MERGE_METHODS}", repr(merge_method))
    waveform = ops[merge_method](first, second)  # broadcasts a mono clip over stereo, as ComfyUI
    peak = waveform.abs().max()
    if peak > 1.0:
        waveform = waveform / peak
    return ({"waveform": waveform, "sample_rate": rate},)


@node("AudioAdjustVolume", category="audio", display_name="Audio Adjust Volume", python_module=MODULE,
      inputs=[Input("audio", "AUDIO"),
              Int("volume", default=1.0, min=-100, max=100,
                  tooltip="Volume adjustment in decibels (dB). 0 = no change, +6 = double, -6 = half, etc")],
      outputs=[Output("AUDIO")])
def audio_adjust_volume(audio: dict, volume: int) -> tuple[dict]:
    """The waveform times 10^(volume / 20); 0 dB returns the input itself."""
    if volume == 0:
        return (audio,)
    waveform, rate = _audio(audio, "audio")
    return ({"waveform": waveform * 10 ** (volume / 20), "sample_rate": rate},)


@node("EmptyAudio", category="audio", display_name="Empty Audio", python_module=MODULE,
      inputs=[Float("duration", default=60.0, min=0.0, max=SECONDS_LIMIT, step=0.01,
                    tooltip="Duration of the empty audio clip in seconds"),
              Int("sample_rate", default=44100, tooltip="Sample rate of the empty audio clip."),
              Int("channels", default=2, min=1, max=2, tooltip="Number of audio channels (1 for mono, 2 for stereo).")],
      outputs=[Output("AUDIO")])
def empty_audio(duration: float, sample_rate: int, channels: int) -> tuple[dict]:
    import torch

    if sample_rate <= 0:
        raise NodeInputError("sample_rate", "a positive sample rate", str(sample_rate))
    return ({"waveform": torch.zeros((1, channels, round(duration * sample_rate)), dtype=torch.float32),
             "sample_rate": sample_rate},)
