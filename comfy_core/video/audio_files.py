"""Audio files with PyAV, as ComfyUI 0.3.64's comfy_extras/nodes_audio.py: `load` (the first
audio stream of any file FFmpeg reads, audio or video) and `save_audio` (FLAC, MP3, Opus).

- Reading gives float32 `[C, S]` and the stream's sample rate (audio_frames.planar_float).
- Writing encodes one packed float frame holding the whole clip; tags are the metadata values as
  given (the nodes JSON-encode the prompt and workflow, as ComfyUI).
- Opus takes 8, 12, 16, 24 or 48 kHz: another rate goes up to the next one (above 48 kHz: 48 kHz),
  as ComfyUI; where ComfyUI resamples with torchaudio, PyAV's encoder resamples here (libswresample,
  which the encoder already applies to convert the sample format).
- Quality names are ComfyUI's: MP3 `V0` (variable, qscale), `128k`, `320k`; Opus `64k` .. `320k`.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from comfy_core.video.audio_frames import LAYOUTS, decoded_audio, packed_frame
from comfy_core.video.errors import UnknownChoiceError, UnreadableAudioError, VideoEncodingError

if TYPE_CHECKING:
    import torch

AUDIO_FORMATS = ("flac", "mp3", "opus")
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
MP3_QUALITIES = ("V0", "128k", "320k")
OPUS_QUALITIES = ("64k", "96k", "128k", "192k", "320k")
_ENCODERS = {"flac": "flac", "mp3": "libmp3lame", "opus": "libopus"}
_BIT_RATES = {"64k": 64000, "96k": 96000, "128k": 128000, "192k": 192000, "320k": 320000}


def read_audio(path: str | Path | io.BytesIO) -> tuple[torch.Tensor, int]:
    """The first audio stream of `path` as (float32 `[C, S]`, sample rate)."""
    import av

    if isinstance(path, io.BytesIO):
        path.seek(0)
    try:
        with av.open(path if isinstance(path, io.BytesIO) else str(path), mode="r") as container:
            if not container.streams.audio:
                raise UnreadableAudioError(path, "it has no audio stream")
            audio = decoded_audio(container, container.streams.audio[0])
    except av.FFmpegError as exc:
        raise UnreadableAudioError(path, str(exc)) from exc
    except (EOFError, UnicodeDecodeError) as exc:
        raise UnreadableAudioError(path, f"{type(exc).__name__}: {exc}") from exc
    if audio is None:
        raise UnreadableAudioError(path, "no audio frame could be decoded")
    return audio["waveform"][0], audio["sample_rate"]


def opus_rate(sample_rate: int) -> int:
    """The rate an Opus file of a `sample_rate` clip is written at (ComfyUI's rule)."""
    if sample_rate > 48000:
        return 48000
    return next((rate for rate in OPUS_RATES if rate >= sample_rate), 48000)


def _quality_options(format: str, quality: str | None) -> dict:  # noqa: A002
    if format == "mp3":
        quality = quality or "V0"
        if quality not in MP3_QUALITIES:
            raise UnknownChoiceError("MP3 quality", quality, MP3_QUALITIES)
        return {"qscale": True} if quality == "V0" else {"bit_rate": _BIT_RATES[quality]}
    if format == "opus":
        quality = quality or "128k"
        if quality not in OPUS_QUALITIES:
            raise UnknownChoiceError("Opus quality", quality, OPUS_QUALITIES)
        return {"bit_rate": _BIT_RATES[quality]}
    return {}


def encode_audio(waveform: torch.Tensor, sample_rate: int, format: str = "flac",  # noqa: A002
                 quality: str | None = None, metadata: dict[str, str] | None = None) -> bytes:
    """One clip (`[C, S]`, 1 or 2 channels) as the bytes of a `format` file with tags `metadata`."""
    import av

    if format not in AUDIO_FORMATS:
        raise UnknownChoiceError("audio format", format, AUDIO_FORMATS)
    options = _quality_options(format, quality)
    if waveform.ndim != 2 or waveform.shape[0] not in LAYOUTS or waveform.shape[1] == 0:
        raise VideoEncodingError(f"audio must be [channels, samples] with 1 or 2 channels and samples, "
                                 f"received shape {list(waveform.shape)}")
    rate = opus_rate(sample_rate) if format == "opus" else int(sample_rate)
    layout = LAYOUTS[int(waveform.shape[0])]
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=format) as output:
        for key, value in (metadata or {}).items():
            output.metadata[key] = value
        stream = output.add_stream(_ENCODERS[format], rate=rate, layout=layout)
        if options.get("qscale"):
            stream.codec_context.qscale = 1
        if "bit_rate" in options:
            stream.bit_rate = options["bit_rate"]
        output.mux(stream.encode(packed_frame(waveform, sample_rate)))
        output.mux(stream.encode(None))
    return buffer.getvalue()
