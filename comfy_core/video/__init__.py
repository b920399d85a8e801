"""Video and audio files with PyAV: ComfyUI's VIDEO value (`VideoFromFile`, lazy; and
`VideoFromComponents`), its container/codec choices and components, SaveVideo's encoding (H.264
or AV1 in MP4 / MKV / WebM, AAC or Opus audio, an optional crf) and SaveWEBM's (VP9 / AV1), stream
copying, and audio files (FLAC, MP3, Opus). The library layer: no node, no graph. ComfyUI's
`comfy_api` video objects (compat/v3/video.py) are these classes.
"""
from comfy_core.video.errors import (MediaFileError, UnknownChoiceError, UnreadableAudioError, UnreadableVideoError,
                                     VideoEncodingError)
from comfy_core.video.from_components import VideoFromComponents
from comfy_core.video.from_file import VideoFromFile
from comfy_core.video.types import VideoCodec, VideoComponents, VideoContainer, VideoInput

__all__ = ["MediaFileError", "UnknownChoiceError", "UnreadableAudioError", "UnreadableVideoError", "VideoEncodingError",
           "VideoFromComponents", "VideoFromFile", "VideoCodec", "VideoComponents", "VideoContainer", "VideoInput"]
