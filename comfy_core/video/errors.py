"""The errors of video and audio files: a file that cannot be read, a container or codec that is
not offered, frames an encoder cannot take.

Each names what it is about (the file, the choice and the choices there are), so the message a
user sees says what to change. They are `ValueError`s: bad input, as the nodes' own errors.
comfy_core knows no node; the video nodes add the node and input (nodes/video_io.py).
"""
from __future__ import annotations

from typing import Any, Sequence


class MediaFileError(ValueError):
    """A video or audio file that cannot be read: `path` and the `reason` the decoder gave."""

    kind = "media"

    def __init__(self, path: Any, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{_source_name(path)} is not a readable {self.kind} file: {reason}")


class UnreadableVideoError(MediaFileError):
    """A file that is no video PyAV can open and decode (corrupt, truncated, not a video at all,
    or without a video stream)."""

    kind = "video"


class UnreadableAudioError(MediaFileError):
    """A file without a decodable audio stream."""

    kind = "audio"


class UnknownChoiceError(ValueError):
    """A container, codec or audio format that is not offered: names the choices."""

    def __init__(self, what: str, value: Any, choices: Sequence[str]) -> None:
        self.what = what
        self.value = value
        self.choices = list(choices)
        super().__init__(f"unknown {what} {value!r}: the choices are {self.choices}")


class VideoEncodingError(ValueError):
    """Frames or audio an encoder cannot take (odd sides for 4:2:0 chroma, no frames, a wrong
    shape): says what was received and what the encoder needs."""


def _source_name(path: Any) -> str:
    if isinstance(path, (str, bytes)) or hasattr(path, "__fspath__"):
        return f"{str(path)!r}"
    return "the in-memory file"
