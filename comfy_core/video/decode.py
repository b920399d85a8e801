"""Reading video files with PyAV, as ComfyUI's `VideoFromFile` does
(comfy_api/latest/_input_impl/video_types.py, 0.3.64): every frame of the first video stream as
RGB, the frame rate from the stream's average rate, the first audio stream as an AUDIO dict and
the container's metadata.

What differs, on purpose: any failure of the demuxer or decoder (a corrupt, truncated or
non-video file, a missing file, no video stream, no frame) is an `UnreadableVideoError` naming
the file, not PyAV's bare error; audio comes back as float32 whatever the decoder's sample
format (ComfyUI passes integer PCM through), planar `[C, S]` also for packed formats.
"""
from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

from comfy_core.video.audio_frames import decoded_audio
from comfy_core.video.containers import container_format, opened_video, rewound, video_stream
from comfy_core.video.errors import UnreadableVideoError
from comfy_core.video.types import VideoComponents

if TYPE_CHECKING:
    from av.container import InputContainer

__all__ = ["container_format", "dimensions", "duration", "opened_video", "probe", "read_components", "rewound",
           "video_stream"]


def dimensions(source: Any) -> tuple[int, int]:
    """(width, height) of the first video stream, from the headers (nothing is decoded)."""
    with opened_video(source) as container:
        stream = video_stream(container, source)
        return int(stream.width), int(stream.height)


def bit_depth(source: Any) -> int:
    """Bits per sample of the first video stream's pixel format (the widest component; 8 when
    the file has no video stream or its format is unknown), as today's ComfyUI reads it."""
    with opened_video(source) as container:
        stream = container.streams.video[0] if container.streams.video else None
        components = getattr(getattr(stream, "format", None), "components", None) if stream is not None else None
        return max((c.bits for c in components), default=8) if components else 8


def color_space(source: Any) -> str:
    """The first video stream's colour space by its transfer tag: BT.709 or sRGB -> "sRGB",
    ARIB STD-B67 (HLG) -> "HDR", SMPTE 2084 (PQ) -> "HDR PQ"; "sRGB" when untagged."""
    from av.video.reformatter import ColorTrc

    spaces = {ColorTrc.BT709: "sRGB", ColorTrc.IEC61966_2_1: "sRGB", ColorTrc.ARIB_STD_B67: "HDR",
              ColorTrc.SMPTE2084: "HDR PQ"}
    with opened_video(source) as container:
        stream = container.streams.video[0] if container.streams.video else None
        return spaces.get(getattr(stream, "color_trc", None), "sRGB") if stream is not None else "sRGB"


def duration(source: Any) -> float:
    """Seconds: the container's duration, else frames / rate from the stream, else the frames
    counted by decoding (ComfyUI's order of fallbacks)."""
    import av

    with opened_video(source) as container:
        if container.duration is not None:
            return float(container.duration / av.time_base)
        stream = video_stream(container, source)
        if not stream.average_rate:
            raise UnreadableVideoError(source, "neither its duration nor its frame rate is known")
        if stream.frames:
            return float(stream.frames / stream.average_rate)
        count = sum(1 for _ in container.decode(stream))
        if count == 0:
            raise UnreadableVideoError(source, "no video frame could be decoded")
        return float(count / stream.average_rate)


def probe(source: Any) -> tuple[int, int]:
    """(width, height) after decoding the first frame: proof that the file is a playable video
    (what LoadVideo's validation asks before a prompt is queued)."""
    with opened_video(source) as container:
        stream = video_stream(container, source)
        for _ in container.decode(stream):
            return int(stream.width), int(stream.height)
    raise UnreadableVideoError(source, "no video frame could be decoded")


def read_components(container: InputContainer, source: Any) -> VideoComponents:
    """All frames (`[T, H, W, 3]` float32 in 0..1), frame rate, first audio stream, metadata."""
    import numpy as np
    import torch

    stream = video_stream(container, source)
    frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]  # each [H, W, 3] uint8
    if not frames:
        raise UnreadableVideoError(source, "no video frame could be decoded")
    images = torch.from_numpy(np.stack(frames)).to(torch.float32).div_(255.0)
    frame_rate = Fraction(stream.average_rate) if stream.average_rate else Fraction(1)
    audio = None
    if container.streams.audio:
        container.seek(0)
        audio = decoded_audio(container, container.streams.audio[0])
    return VideoComponents(images=images, audio=audio, frame_rate=frame_rate, metadata=dict(container.metadata))
