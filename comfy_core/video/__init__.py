"""Video and audio files with PyAV: ComfyUI's VIDEO value (`VideoFromFile`, lazy; and
`VideoFromComponents`), its container/codec choices and components, MP4 (H.264 + AAC) and WEBM
(VP9 / AV1) encoding, stream copying, and audio files (FLAC, MP3, Opus). The library layer: no
node, no graph. ComfyUI's `comfy_api` video objects (compat/v3/video.py) are these classes.
"""
from comfy_core.video.errors import (MediaFileError, UnknownChoiceError, UnreadableAudioError, UnreadableVideoError,
                                     VideoEncodingError)
from comfy_core.video.from_components import VideoFromComponents
from comfy_core.video.from_file import VideoFromFile
from comfy_core.video.types import VideoCodec, VideoComponents, VideoContainer, VideoInput

__all__ = ["MediaFileError", "UnknownChoiceError", "UnreadableAudioError", "UnreadableVideoError", "VideoEncodingError",
           "VideoFromComponents", "VideoFromFile", "VideoCodec", "VideoComponents", "VideoContainer", "VideoInput"]
