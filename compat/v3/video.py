"""ComfyUI's video types for V3 packs (`comfy_api.latest.Types` / `InputImpl`, its
comfy_api/latest/_util/video_types.py and _input_impl/video_types.py): the codec and container
enums, `VideoComponents`, and the `VIDEO` values `VideoFromComponents` / `VideoFromFile`.

What needs no codec works: the enums, the components, a components video's frames, size,
duration and frame rate. Encoding or decoding files needs the PyAV package, which this engine
does not ship: `save_to` and reading a `VideoFromFile` raise `VideoBackendMissingError`.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Any


class VideoBackendMissingError(RuntimeError):
    """Encoding or decoding a video file was asked for; that needs PyAV (`pip install av`),
    which this engine does not use."""


def _no_backend(what: str) -> VideoBackendMissingError:
    return VideoBackendMissingError(f"{what}: video files are encoded and decoded with PyAV, which this engine "
                                    "does not ship (video frames as IMAGE batches work without it)")


class VideoCodec(str, Enum):
    AUTO = "auto"
    H264 = "h264"

    @classmethod
    def as_input(cls) -> list[str]:
        """The codec names a combo input offers."""
        return [member.value for member in cls]


class VideoContainer(str, Enum):
    AUTO = "auto"
    MP4 = "mp4"

    @classmethod
    def as_input(cls) -> list[str]:
        return [member.value for member in cls]

    @classmethod
    def get_extension(cls, value: Any) -> str:
        """The file extension of a container ("mp4" for auto, as ComfyUI)."""
        if isinstance(value, str):
            value = cls(value)
        return "mp4" if value in (cls.MP4, cls.AUTO) else ""


@dataclass
class VideoComponents:
    """Frames (IMAGE `[T, H, W, C]`), frame rate, optional AUDIO and metadata."""

    images: Any
    frame_rate: Fraction
    audio: Any = None
    metadata: dict | None = None


class VideoInput:
    """ComfyUI's abstract `VIDEO` value."""

    def get_components(self) -> VideoComponents:
        raise NotImplementedError

    def save_to(self, path: Any, format: Any = VideoContainer.AUTO, codec: Any = VideoCodec.AUTO,  # noqa: A002
                metadata: dict | None = None) -> None:
        raise _no_backend(f"{type(self).__name__}.save_to")

    def get_stream_source(self) -> Any:
        raise _no_backend(f"{type(self).__name__}.get_stream_source")

    def get_dimensions(self) -> tuple[int, int]:
        """(width, height) of the frames."""
        images = self.get_components().images
        return int(images.shape[2]), int(images.shape[1])

    def get_duration(self) -> float:
        components = self.get_components()
        return float(components.images.shape[0] / components.frame_rate)

    def get_container_format(self) -> str:
        raise _no_backend(f"{type(self).__name__}.get_container_format")


class VideoFromComponents(VideoInput):
    """A video held as its components (ComfyUI's `InputImpl.VideoFromComponents`)."""

    def __init__(self, components: VideoComponents) -> None:
        self.__components = components

    def get_components(self) -> VideoComponents:
        return VideoComponents(images=self.__components.images, audio=self.__components.audio,
                               frame_rate=self.__components.frame_rate, metadata=self.__components.metadata)


class VideoFromFile(VideoInput):
    """A video file (path or BytesIO): its source is kept, its frames need PyAV."""

    def __init__(self, file: str | io.BytesIO) -> None:
        self.__file = file

    def get_stream_source(self) -> str | io.BytesIO:
        if isinstance(self.__file, io.BytesIO):
            self.__file.seek(0)
        return self.__file

    def get_components(self) -> VideoComponents:
        raise _no_backend("VideoFromFile.get_components")

    def get_dimensions(self) -> tuple[int, int]:
        raise _no_backend("VideoFromFile.get_dimensions")

    def get_duration(self) -> float:
        raise _no_backend("VideoFromFile.get_duration")


class InputImpl:
    """ComfyUI's `comfy_api.latest.InputImpl` namespace."""

    VideoFromFile = VideoFromFile
    VideoFromComponents = VideoFromComponents


class Types:
    """ComfyUI's `comfy_api.latest.Types` namespace."""

    VideoCodec = VideoCodec
    VideoContainer = VideoContainer
    VideoComponents = VideoComponents
