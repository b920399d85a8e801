"""ComfyUI's `VideoFromFile` (comfy_api/latest/_input_impl/video_types.py, 0.3.64): a VIDEO that
is a file (a path or a BytesIO), read lazily: LoadVideo makes one without decoding anything;
size, duration and format come from the headers, frames only when `get_components` is asked.

Saving it copies the streams packet by packet into the new file with the new metadata
(remux.copy_streams) when they can stay as they are, as ComfyUI: the container is `auto` or the
file's own, the codec `auto` or the file's own, no `crf` is asked for, and a WebM gets only
WebM's codecs. Otherwise the frames are decoded and encoded as `VideoFromComponents` does, the
file's tags kept under the new metadata.
Unreadable files raise `UnreadableVideoError` naming the file (decode.opened_video).
"""
from __future__ import annotations

import io
from typing import IO, Any

from comfy_core.video import decode
from comfy_core.video.encode import MUXERS, check_crf, resolve_output, write_video
from comfy_core.video.remux import copy_streams, stream_codec, webm_compatible
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

    def get_bit_depth(self) -> int:
        return decode.bit_depth(self.__file)

    def get_color_space(self) -> str:
        return decode.color_space(self.__file)

    def get_container_format(self) -> str:
        return decode.container_format(self.__file)

    def get_components_internal(self, container: Any) -> VideoComponents:
        """The components read from an already open container (ComfyUI's name, packs call it)."""
        return decode.read_components(container, self.__file)

    def get_components(self) -> VideoComponents:
        with decode.opened_video(self.__file) as container:
            return decode.read_components(container, self.__file)

    def save_to(self, path: str | IO[bytes], format: Any = VideoContainer.AUTO,  # noqa: A002
                codec: Any = VideoCodec.AUTO, metadata: dict | None = None, crf: float | None = None) -> None:
        format, codec = VideoContainer.parse(format), VideoCodec.parse(codec)
        output_container, output_codec = resolve_output(path, format, codec)  # refuses WebM + H.264 up front
        check_crf(crf, output_codec)
        with decode.opened_video(self.__file) as container:
            container_format = container.format.name
            video = stream_codec(container.streams.video[0]) if container.streams.video else None
            same_container = format == VideoContainer.AUTO or MUXERS[format] in container_format.split(",")
            same_codec = codec == VideoCodec.AUTO or video is None or codec.value == video
            webm_ok = output_container != VideoContainer.WEBM or webm_compatible(container)
            if same_container and same_codec and webm_ok and crf is None:
                copy_streams(container, path, container_format, format, metadata)
                return
            components = decode.read_components(container, self.__file)
        write_video(path, components.images, components.frame_rate, components.audio, metadata, format=format,
                    codec=codec, crf=crf, source_tags=components.metadata, encode_strings=False)
