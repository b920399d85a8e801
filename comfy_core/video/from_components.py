"""ComfyUI's `VideoFromComponents` (comfy_api/latest/_input_impl/video_types.py, 0.3.64): a
VIDEO held as frames, frame rate and optional audio (what CreateVideo makes); saving it encodes
an MP4 (encode.write_mp4), the only container and codec ComfyUI offers for it."""
from __future__ import annotations

from typing import IO, Any

from comfy_core.video.encode import write_mp4
from comfy_core.video.types import VideoCodec, VideoComponents, VideoContainer, VideoInput


class VideoFromComponents(VideoInput):
    """A video made of its components; `get_components` hands back the same frames (no copy)
    and, as ComfyUI, no metadata."""

    def __init__(self, components: VideoComponents) -> None:
        self.__components = components

    def get_components(self) -> VideoComponents:
        return VideoComponents(images=self.__components.images, audio=self.__components.audio,
                               frame_rate=self.__components.frame_rate)

    def save_to(self, path: str | IO[bytes], format: Any = VideoContainer.AUTO,  # noqa: A002
                codec: Any = VideoCodec.AUTO, metadata: dict | None = None) -> None:
        VideoContainer.parse(format)  # auto and mp4 both mean MP4; anything else is refused
        VideoCodec.parse(codec)  # likewise auto and h264
        components = self.__components
        write_mp4(path, components.images, components.frame_rate, components.audio, metadata)
