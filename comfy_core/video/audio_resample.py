"""Changing an AUDIO waveform's sample rate, for the nodes that join two clips (AudioConcat,
AudioMerge). ComfyUI resamples with torchaudio's windowed-sinc `functional.resample`; torchaudio has
no build for this torch, so FFmpeg's libswresample does it here, through PyAV (the library the
audio files are read and written with): the same band-limited interpolation idea, not the same
filter taps, so samples differ slightly from ComfyUI's (lengths agree to within a sample).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from comfy_core.video.audio_frames import LAYOUTS, packed_frame, planar_float

if TYPE_CHECKING:
    import torch


def resample(waveform: "torch.Tensor", rate: int, target: int) -> "torch.Tensor":
    """`waveform` `[B, C, S]` (1 or 2 channels) from `rate` to `target` Hz, float32 `[B, C, S']`."""
    import av
    import torch

    if rate == target:
        return waveform
    channels = int(waveform.shape[1])
    out = []
    for item in waveform:
        resampler = av.AudioResampler(format="fltp", layout=LAYOUTS[channels], rate=int(target))
        frames = resampler.resample(packed_frame(item, rate)) + resampler.resample(None)  # None flushes
        out.append(torch.cat([planar_float(frame, channels) for frame in frames], dim=1))
    length = min(part.shape[1] for part in out)
    return torch.stack([part[:, :length] for part in out])
