"""Module-level helpers of ComfyUI's `comfy_extras.nodes_audio` that packs call directly.

`load(filepath)` is what ComfyUI's LoadAudio and RecordAudio read a file with: the first audio
stream of any file FFmpeg reads (audio, or a video's sound track, a browser's WebM recording), as
float32 `[channels, samples]` and the stream's sample rate. Here it is the decoder our LoadAudio
node uses (`comfy_core.video.audio_files.read_audio`, PyAV). `f32_pcm` is ComfyUI's conversion of
integer PCM to float (int16 / 2^15, int32 / 2^31). Behaviour of ComfyUI's comfy_extras/nodes_audio.py.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def f32_pcm(wav: torch.Tensor) -> torch.Tensor:
    """`wav` as float PCM: a floating tensor unchanged, int16 over 2^15, int32 over 2^31; other
    dtypes raise ValueError, as ComfyUI's."""
    import torch

    if wav.dtype.is_floating_point:
        return wav
    if wav.dtype == torch.int16:
        return wav.float() / (2 ** 15)
    if wav.dtype == torch.int32:
        return wav.float() / (2 ** 31)
    raise ValueError(f"Unsupported wav dtype: {wav.dtype}")


def load(filepath: str) -> tuple[torch.Tensor, int]:
    """ComfyUI's `nodes_audio.load`: `(waveform float32 [channels, samples], sample_rate)` of the
    file's first audio stream. A file without an audio stream or decodable frames raises
    ValueError (`comfy_core.video.errors.UnreadableAudioError`), as ComfyUI's does."""
    from comfy_core.video.audio_files import read_audio

    return read_audio(filepath)
