"""ComfyUI's `VideoFromFile` (comfy_api/latest/_input_impl/video_types.py, 0.3.64): a VIDEO that
is a file (a path or a BytesIO), read lazily: LoadVideo makes one without decoding anything;
size, duration and format come from the headers, frames only when `get_components` is asked.

Saving it with `auto` (or the file's own container and codec) copies the streams packet by
packet into the new file with the new metadata (remux.copy_streams); asking for another
container or codec decodes the frames and encodes them as `VideoFromComponents` does.
Unreadable files raise `UnreadableVideoError` naming the file (decode.opened_video).
"""
from __future__ import annotations

import io
from typing import IO, Any

from comfy_core.video import decode
from comfy_core.video.from_components import VideoFromComponents
from comfy_core.video.remux import copy_streams
from comfy_core.video.types import VideoCodec, VideoComponents, VideoContainer, VideoInput


class VideoFromFile(VideoInput):
    """A video file, decoded only when its frames are asked for."""

    def __init__(self, file: str | io.BytesIO) -> None:
        self.__file = file

    def get_stream_source(self) -> str | io.BytesIO:
        """The file itself (a BytesIO rewound), so PyAV reads it without a copy."""
        return decode.rewound(self.__file)

    def get_dimensions(self) -> tuple[int, int]:
        return decode.dimensions(self.__file)

    def get_duration(self) -> float:
        return decode.duration(self.__file)

    def get_container_format(self) -> str:
        return decode.container_format(self.__file)

    def get_components_internal(self, container: Any) -> VideoComponents:
        """The components read from an already open container (ComfyUI's name, packs call it)."""
        return decode.read_components(container, self.__file)

    def get_components(self) -> VideoComponents:
        with decode.opened_video(self.__file) as container:
            return decode.read_components(container, self.__file)

    def save_to(self, path: str | IO[bytes], format: Any = VideoContainer.AUTO,  # noqa: A002
                codec: Any = VideoCodec.AUTO, metadata: dict | None = None) -> None:
        format, codec = VideoContainer.parse(format), VideoCodec.parse(codec)
        with decode.opened_video(self.__file) as container:
            container_format = container.format.name
            video = container.streams.video[0].codec_context.name if container.streams.video else None
            same_container = format == VideoContainer.AUTO or format.value in container_format.split(",")
            same_codec = codec == VideoCodec.AUTO or video is None or codec.value == video
            if same_container and same_codec:
                copy_streams(container, path, container_format, format, metadata)
                return
            components = decode.read_components(container, self.__file)
        VideoFromComponents(components).save_to(path, format=format, codec=codec, metadata=metadata)
