"""ComfyUI's `VideoFromComponents` (comfy_api/latest/_input_impl/video_types.py): a VIDEO held as
frames, frame rate and optional audio (what CreateVideo makes); saving it encodes the frames in
the container and codec asked for (encode.write_video: H.264 or AV1 in MP4, MKV or WebM, with an
optional constant-quality `crf`), at the bit depth and in the colour space it was made with
(today's CreateVideo: 8 or 10 bits; sRGB, HDR HLG or HDR PQ) unless `save_to` asks for others."""
from __future__ import annotations

from typing import IO, Any

from comfy_core.video.encode import write_video
from comfy_core.video.types import (VideoCodec, VideoComponents, VideoContainer, VideoInput, check_bit_depth,
                                    check_color_space)


class VideoFromComponents(VideoInput):
    """A video made of its components; `get_components` hands back the same frames (no copy)
    and, as ComfyUI, no metadata."""

    def __init__(self, components: VideoComponents, bit_depth: int = 8, color_space: str = "sRGB") -> None:
        self.__components = components
        # Frames in tensors have no bit depth of their own: this is the depth they are encoded with.
        self.__bit_depth = check_bit_depth(bit_depth)
        self.__color_space = check_color_space(color_space)

    def get_components(self) -> VideoComponents:
        return VideoComponents(images=self.__components.images, audio=self.__components.audio,
                               frame_rate=self.__components.frame_rate)

    def get_bit_depth(self) -> int:
        return self.__bit_depth

    def get_color_space(self) -> str:
        return self.__color_space

    def save_to(self, path: str | IO[bytes], format: Any = VideoContainer.AUTO,  # noqa: A002
                codec: Any = VideoCodec.AUTO, metadata: dict | None = None, crf: float | None = None,
                bit_depth: int | None = None, color_space: str | None = None) -> None:
        components = self.__components
        write_video(path, components.images, components.frame_rate, components.audio, metadata,
                    format=format, codec=codec, crf=crf,
                    bit_depth=self.__bit_depth if bit_depth is None else check_bit_depth(bit_depth),
                    color_space=self.__color_space if color_space is None else check_color_space(color_space))
