"""ComfyUI's `VideoFromComponents` (comfy_api/latest/_input_impl/video_types.py): a VIDEO held as
frames, frame rate and optional audio (what CreateVideo makes); saving it encodes the frames in
the container and codec asked for (encode.write_video: H.264 or AV1 in MP4, MKV or WebM, with an
optional constant-quality `crf`)."""
from __future__ import annotations

from typing import IO, Any

from comfy_core.video.encode import write_video
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
                codec: Any = VideoCodec.AUTO, metadata: dict | None = None, crf: float | None = None) -> None:
        components = self.__components
        write_video(path, components.images, components.frame_rate, components.audio, metadata,
                    format=format, codec=codec, crf=crf)
