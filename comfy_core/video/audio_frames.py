"""PCM between PyAV's audio frames and ComfyUI's AUDIO dict `{"waveform": [B, C, S] float,
"sample_rate": int}` (comfy_extras/nodes_audio.py's `load` / `f32_pcm`, and the audio part of
comfy_api's VideoFromFile, 0.3.64).

Decoders give planar frames (`[C, S]`, e.g. AAC's fltp) or packed ones (`[1, S * C]`
interleaved, e.g. WAV's s16): both become planar float32, integer PCM scaled to -1..1 as
ComfyUI's `f32_pcm`. Encoders get one packed float frame (`flt`) holding the whole signal;
PyAV cuts and converts it to what the codec takes (frame size, sample format).
"""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import av
    import torch

# Integer sample formats and their full scale (ComfyUI's f32_pcm divides by 2**15 / 2**31).
_INTEGER_SCALE = {"s16": 2.0 ** 15, "s16p": 2.0 ** 15, "s32": 2.0 ** 31, "s32p": 2.0 ** 31,
                  "u8": 2.0 ** 7, "u8p": 2.0 ** 7, "s64": 2.0 ** 63, "s64p": 2.0 ** 63}
LAYOUTS = {1: "mono", 2: "stereo"}


def planar_float(frame: av.AudioFrame, channels: int) -> torch.Tensor:
    """One decoded frame as float32 `[C, S]`."""
    import torch

    samples = frame.to_ndarray()
    if samples.shape[0] != channels:  # packed: one row, channels interleaved
        samples = samples.reshape(-1, channels).T
    name = frame.format.name
    out = torch.from_numpy(samples.copy()).to(torch.float32)
    if name.startswith("u8"):
        out -= 128.0
    if name in _INTEGER_SCALE:
        out /= _INTEGER_SCALE[name]
    return out


def decoded_audio(container: Any, stream: Any) -> dict | None:
    """Every frame of `stream` as ComfyUI's AUDIO dict (`[1, C, S]`), or None when it has none."""
    import torch

    channels = int(stream.codec_context.channels or stream.channels)
    parts = [planar_float(frame, channels) for packet in container.demux(stream) for frame in packet.decode()]
    if not parts:
        return None
    rate = int(stream.codec_context.sample_rate or stream.sample_rate or 1)
    return {"waveform": torch.cat(parts, dim=1).unsqueeze(0), "sample_rate": rate}


def packed_frame(waveform: torch.Tensor, sample_rate: int) -> av.AudioFrame:
    """`waveform` `[C, S]` (1 or 2 channels) as one packed float frame at pts 0."""
    import av

    from comfy_core.video.errors import VideoEncodingError

    if waveform.ndim != 2 or waveform.shape[0] not in LAYOUTS:
        raise VideoEncodingError(f"audio must be [channels, samples] with 1 (mono) or 2 (stereo) channels, "
                                 f"received shape {list(waveform.shape)}")
    interleaved = waveform.detach().to("cpu").float().movedim(0, 1).reshape(1, -1).contiguous().numpy()
    frame = av.AudioFrame.from_ndarray(interleaved, format="flt", layout=LAYOUTS[int(waveform.shape[0])])
    frame.sample_rate = int(sample_rate)
    frame.pts = 0
    return frame


def check_audio(audio: Any, what: str = "audio") -> tuple[torch.Tensor, int]:
    """The waveform `[B, C, S]` and sample rate of an AUDIO dict, or `VideoEncodingError`."""
    import torch

    from comfy_core.video.errors import VideoEncodingError

    if not isinstance(audio, dict) or "waveform" not in audio or "sample_rate" not in audio:
        raise VideoEncodingError(f"{what} must be an AUDIO dict {{'waveform': [B, C, S], 'sample_rate': int}}, "
                                 f"received {type(audio).__name__}")
    waveform, rate = audio["waveform"], audio["sample_rate"]
    if not isinstance(waveform, torch.Tensor) or waveform.ndim != 3 or waveform.shape[-1] == 0:
        raise VideoEncodingError(f"{what}['waveform'] must be a [B, C, S] tensor with samples, received "
                                 f"{type(waveform).__name__} of shape {list(getattr(waveform, 'shape', []))}")
    if isinstance(rate, bool) or not isinstance(rate, numbers.Integral) or rate <= 0:
        raise VideoEncodingError(f"{what}['sample_rate'] must be an int > 0, received {rate!r}")
    return waveform, int(rate)
