"""ComfyUI's VIDEO value and its parts (comfy_api/latest/_util/video_types.py and
_input/video_types.py): the container and codec choices, `VideoComponents` and the abstract
`VideoInput` every VIDEO value is.

The choices are today's ComfyUI's (2026: containers auto / mp4 / mkv / webm, codecs auto / h264
/ av1; 0.3.64 had auto / mp4 and auto / h264, still valid), so workflows and `/object_info`
match; a value outside them is an `UnknownChoiceError` that lists them. IMAGE frames are float
`[T, H, W, C]` in 0..1; AUDIO is ComfyUI's dict `{"waveform": [B, C, S] float, "sample_rate": int}`.
"""
from __future__ import annotations

import io
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import IO, Any

from comfy_core.video.errors import UnknownChoiceError


class VideoCodec(str, Enum):
    AUTO = "auto"
    H264 = "h264"
    AV1 = "av1"

    @classmethod
    def as_input(cls) -> list[str]:
        """The codec names a combo input offers."""
        return [member.value for member in cls]

    @classmethod
    def parse(cls, value: Any) -> "VideoCodec":
        """`value` (a member or its name) as a member, or `UnknownChoiceError` naming the choices."""
        return _member(cls, "video codec", value)


class VideoContainer(str, Enum):
    AUTO = "auto"
    MP4 = "mp4"
    MKV = "mkv"
    WEBM = "webm"

    @classmethod
    def as_input(cls) -> list[str]:
        """The container names a combo input offers."""
        return [member.value for member in cls]

    @classmethod
    def get_extension(cls, value: Any) -> str:
        """The file extension of a container: "mp4" for mp4 and for auto, as ComfyUI."""
        value = cls.parse(value)
        return "mp4" if value == cls.AUTO else value.value

    @classmethod
    def parse(cls, value: Any) -> "VideoContainer":
        return _member(cls, "video container", value)


def _member(enum: type[Enum], what: str, value: Any) -> Any:
    if isinstance(value, enum):
        return value
    try:
        return enum(value)
    except ValueError:
        raise UnknownChoiceError(what, value, [member.value for member in enum]) from None


# Today's ComfyUI's colour spaces of a VIDEO (CreateVideo's `color_space`, GetVideoComponents' output):
# sRGB (BT.709 primaries, the sRGB transfer), HDR (BT.2020, HLG) and HDR PQ (BT.2020, SMPTE 2084).
COLOR_SPACES = ("sRGB", "HDR", "HDR PQ")
HDR_COLOR_SPACES = ("HDR", "HDR PQ")
BIT_DEPTHS = (8, 10)  # what encoders write: 10 bits for a depth of 10 or more, else 8 (ComfyUI's rule)


def check_color_space(value: Any) -> str:
    if value not in COLOR_SPACES:
        raise UnknownChoiceError("video color space", value, list(COLOR_SPACES))
    return value


def check_bit_depth(value: Any) -> int:
    """A bit depth (a whole number of bits, at least 1: a file's own may be 12)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        raise UnknownChoiceError("video bit depth", value, [str(d) for d in BIT_DEPTHS])
    return int(value)


@dataclass
class VideoComponents:
    """Frames (IMAGE `[T, H, W, C]`), frame rate, optional AUDIO and the container's metadata."""

    images: Any
    frame_rate: Fraction
    audio: Any = None
    metadata: dict | None = None


class VideoInput(ABC):
    """ComfyUI's abstract `VIDEO` value: its components, and saving it to a file or stream."""

    @abstractmethod
    def get_components(self) -> VideoComponents:
        """Frames, audio, frame rate (and metadata, for a file)."""

    @abstractmethod
    def save_to(self, path: str | IO[bytes], format: Any = VideoContainer.AUTO,  # noqa: A002
                codec: Any = VideoCodec.AUTO, metadata: dict | None = None, crf: float | None = None) -> None:
        """Write the video to `path` (a file name or a binary stream); `crf` re-encodes at that
        constant quality (H.264 0..51, AV1 0..63)."""

    def get_stream_source(self) -> str | io.BytesIO:
        """Something `av.open` reads: the video written to memory unless a subclass holds a file."""
        buffer = io.BytesIO()
        self.save_to(buffer)
        buffer.seek(0)
        return buffer

    def get_bit_depth(self) -> int:
        """Bits per colour sample the video is (or will be) encoded with: 8 unless it says more."""
        return 8

    def get_color_space(self) -> str:
        """One of `COLOR_SPACES`: "sRGB" unless it says otherwise."""
        return "sRGB"

    def get_dimensions(self) -> tuple[int, int]:
        """(width, height) of the frames."""
        images = self.get_components().images
        return int(images.shape[2]), int(images.shape[1])

    def get_duration(self) -> float:
        """Seconds: frames / frame rate."""
        components = self.get_components()
        return float(components.images.shape[0] / components.frame_rate)

    def get_container_format(self) -> str:
        """The container's format name as FFmpeg reports it (`"mov,mp4,m4a,3gp,3g2,mj2"`)."""
        from comfy_core.video.containers import container_format

        return container_format(self.get_stream_source())
