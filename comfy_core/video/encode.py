"""Writing videos with PyAV, as ComfyUI 0.3.64 does: `VideoFromComponents.save_to` (MP4, H.264
in yuv420p, AAC audio; comfy_api/latest/_input_impl/video_types.py) and SaveWEBM (VP9 or AV1;
comfy_extras/nodes_video.py).

- Frames become uint8 by `clamp(255 x)` and truncation, as ComfyUI; an alpha channel is dropped.
- The frame rate is rounded to 1/1000 (`Fraction(round(fps * 1000), 1000)`), as ComfyUI.
- Metadata: each value JSON-encoded into the container's tags (MP4 with
  `movflags=use_metadata_tags`, so any key survives), so `prompt` / `workflow` read back as
  ComfyUI writes them.
- Audio in an MP4 is cut to the frames' length (`ceil(rate / fps * frames)` samples) and
  encoded as AAC from one packed float frame, mono or stereo as given (ComfyUI's stream defaults
  to stereo); the first item of the batch is the track.
- H.264 and AV1 in 4:2:0 need even sides: ComfyUI hands odd sizes to the encoder, which fails
  with FFmpeg's opaque "Generic error in an external library"; here the same refusal is a
  `VideoEncodingError` that says which side is odd (nothing is cropped behind the user's back).
"""
from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from comfy_core.video.audio_frames import LAYOUTS, check_audio, packed_frame
from comfy_core.video.errors import UnknownChoiceError, VideoEncodingError

if TYPE_CHECKING:
    import numpy as np
    import torch

# SaveWEBM's codec choices and the FFmpeg encoders behind them (ComfyUI's codec_map).
WEBM_ENCODERS = {"vp9": "libvpx-vp9", "av1": "libsvtav1"}
MP4_OPTIONS = {"movflags": "use_metadata_tags"}


def frame_rate_of(fps: Any) -> Fraction:
    """`fps` as the rational rate an encoder gets: rounded to 1/1000, > 0."""
    if isinstance(fps, bool) or not isinstance(fps, (int, float, Fraction)) or not fps > 0 or not math.isfinite(fps):
        raise VideoEncodingError(f"the frame rate must be a number > 0, received {fps!r}")
    rate = Fraction(round(fps * 1000), 1000)
    if rate <= 0:
        raise VideoEncodingError(f"the frame rate {fps!r} rounds to 0 at 1/1000")
    return rate


def frames_uint8(images: Any) -> np.ndarray:
    """IMAGE frames `[T, H, W, C]` (C >= 3) as uint8 RGB `[T, H, W, 3]`."""
    import numpy as np
    import torch

    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[-1] < 3 or 0 in images.shape:
        raise VideoEncodingError("frames must be an IMAGE tensor [frames, height, width, 3 or 4] with at least one "
                                 f"frame, received {type(images).__name__} of shape {list(getattr(images, 'shape', []))}")
    rgb = images[..., :3].detach().to("cpu", torch.float32)
    return np.clip(255.0 * rgb.numpy(), 0, 255).astype(np.uint8)


def check_even_sides(width: int, height: int, codec: str) -> None:
    odd = [f"{name} {value}" for name, value in (("width", width), ("height", height)) if value % 2]
    if odd:
        raise VideoEncodingError(f"{codec} in 4:2:0 chroma needs an even width and height; {' and '.join(odd)} "
                                 f"is odd (frames are {width}x{height}): crop or scale the frames first")


def write_metadata(container: Any, metadata: dict | None, *, encode_strings: bool = True) -> None:
    """Container tags from `metadata`: values JSON-encoded (strings too, unless `encode_strings`
    is false, as ComfyUI's remux keeps them)."""
    for key, value in (metadata or {}).items():
        container.metadata[str(key)] = value if isinstance(value, str) and not encode_strings else json.dumps(value)


def write_mp4(dest: Any, images: Any, frame_rate: Any, audio: Any = None, metadata: dict | None = None) -> None:
    """`images` at `frame_rate` as H.264 (yuv420p) in MP4, with `audio` as AAC, into `dest`
    (a path, or a binary stream)."""
    import av

    pixels = frames_uint8(images)
    count, height, width = pixels.shape[:3]
    check_even_sides(width, height, "H.264")
    rate = frame_rate_of(frame_rate)
    track = None
    if audio is not None:
        waveform, sample_rate = check_audio(audio)
        if waveform.shape[1] not in LAYOUTS:  # refused before any file is created
            raise VideoEncodingError(f"audio must have 1 (mono) or 2 (stereo) channels, received "
                                     f"{waveform.shape[1]}")
        track = (waveform[0, :, :math.ceil(sample_rate / rate * count)], sample_rate)
    kwargs = {} if isinstance(dest, (str, bytes)) or hasattr(dest, "__fspath__") else {"format": "mp4"}
    with av.open(dest, mode="w", options=dict(MP4_OPTIONS), **kwargs) as output:
        write_metadata(output, metadata)
        stream = output.add_stream("h264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        # The track's own layout: ComfyUI leaves PyAV's default (stereo), which turns mono into two channels.
        audio_stream = (output.add_stream("aac", rate=track[1], layout=LAYOUTS.get(int(track[0].shape[0]), "stereo"))
                        if track is not None else None)
        for frame in pixels:
            picture = av.VideoFrame.from_ndarray(frame, format="rgb24").reformat(format="yuv420p")
            output.mux(stream.encode(picture))
        output.mux(stream.encode(None))
        if audio_stream is not None:
            output.mux(audio_stream.encode(packed_frame(*track)))
            output.mux(audio_stream.encode(None))


def write_webm(dest: Any, images: Any, codec: str, fps: Any, crf: float, metadata: dict | None = None) -> None:
    """SaveWEBM's file: `images` as VP9 (yuv420p) or AV1 (yuv420p10le, SVT preset 6) at
    constant quality `crf`, metadata values JSON-encoded."""
    import av

    if codec not in WEBM_ENCODERS:
        raise UnknownChoiceError("WEBM codec", codec, list(WEBM_ENCODERS))
    pixels = frames_uint8(images)
    height, width = pixels.shape[1:3]
    if codec == "av1":
        check_even_sides(width, height, "AV1")
    rate = frame_rate_of(fps)
    kwargs = {} if isinstance(dest, (str, bytes)) or hasattr(dest, "__fspath__") else {"format": "webm"}
    with av.open(dest, mode="w", **kwargs) as output:
        write_metadata(output, metadata)
        stream = output.add_stream(WEBM_ENCODERS[codec], rate=rate)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p10le" if codec == "av1" else "yuv420p"
        stream.bit_rate = 0
        stream.options = {"crf": str(crf), **({"preset": "6"} if codec == "av1" else {})}
        for frame in pixels:
            output.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        output.mux(stream.encode(None))
